#include "search/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "cost/comm.hpp"
#include "plan/buckets.hpp"
#include "predict/stage_cost.hpp"
#include "schedule/schedule.hpp"
#include "sim/sim.hpp"

namespace het::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLadderTop = 64;  // the ladder's last rung before jumping to t_E
}

struct Evaluator::Prepared {
  Layout layout;
  int microbatches = 0;
  std::vector<int> offset;                            // first device of each stage's block in its subcluster
  std::vector<std::vector<const Table*>> tables;      // [stage][recompute option]
  std::vector<const Table*> distinct;                 // the tables above, each once (like stages share one)
  std::vector<double> hop;                            // c_i to the next stage
  std::vector<bool> cross;                            // hop leaves the subcluster
  std::vector<LinkSpec> sync_link, whole_link;        // link of each stage's gradient all-reduce: split, whole parameters
  int tied_ring = 0;                                  // gpt's tied embedding: the first and last stages' ranks
  LinkSpec tied_link;                                 // and their ring's link
};

Evaluator::Evaluator(const ModelSpec& model, const ClusterSpec& cluster, const cost::ComputeModel& compute,
                     std::vector<Recompute> recompute_options, Granularity granularity, const predict::Options& predict)
    : model_(model),
      cluster_(cluster),
      compute_(compute),
      recompute_(std::move(recompute_options)),
      granularity_(granularity),
      predict_(predict),
      units_(het::num_units(model, granularity)) {
  for (const SeqLengthBucket& b : model.seq_lengths)
    lengths_.push_back({at_length(model, b.length), compute.at_length(b.length), b.share});
  if (lengths_.empty()) lengths_.push_back({model, compute, 1.0});
  longest_ = lengths_.back().model;
  // Cheapest first: the DP takes the first option that fits.
  std::sort(recompute_.begin(), recompute_.end());
  recompute_.erase(std::unique(recompute_.begin(), recompute_.end()), recompute_.end());
  if (recompute_.empty()) recompute_ = {Recompute::none};
}

bool Evaluator::admissible(const Layout& l) const {
  const auto& t = model_.training;
  if (l.stages.empty() || static_cast<int>(l.stages.size()) > units_ || l.pipelines < 1) return false;
  if (t.global_batch_size % (l.pipelines * l.micro_batch_size) != 0) return false;
  for (std::size_t b = 0; b < model_.seq_lengths.size(); ++b)  // a micro-batch holds one bucket's sequences
    if (bucket_sequences(model_, b) % l.micro_batch_size != 0) return false;
  std::vector<int> used(cluster_.subclusters.size(), 0);
  for (const auto& s : l.stages) {
    if (s.sub < 0 || s.sub >= static_cast<int>(used.size())) return false;
    if (l.micro_batch_size % s.dp != 0) return false;
    if (model_.num_attention_heads % s.tp != 0 || model_.num_kv_heads % s.tp != 0) return false;
    if (model_.seq_length % s.cp != 0) return false;
    for (const Length& b : lengths_)
      if (b.model.seq_length % s.cp != 0) return false;
    used[s.sub] += l.pipelines * s.devices();
  }
  for (std::size_t j = 0; j < used.size(); ++j)
    if (used[j] > cluster_.subclusters[j].num_devices()) return false;
  return true;
}

namespace {
// A stage's devices: `count` devices from `offset` on, in node-major order.
std::vector<DeviceRef> block(const SubclusterSpec& sub, int offset, int count) {
  std::vector<DeviceRef> out;
  for (int k = offset; k < offset + count; ++k) out.push_back({k / sub.devices_per_node, k % sub.devices_per_node});
  return out;
}

// A stage of shape `sh` on `count` devices of its subcluster from `offset` (one pipeline's
// copy: sh.devices(); every pipeline's side by side: pipelines × that), as predict's links see it.
Stage stage_on(const ClusterSpec& cluster, const StageShape& sh, int offset, int count) {
  Stage st;
  st.subcluster = cluster.subclusters[sh.sub].name;
  st.tp = sh.tp, st.cp = sh.cp, st.dp = sh.dp;
  st.devices = block(cluster.subclusters[sh.sub], offset, count);
  return st;
}
}  // namespace

const Evaluator::Table& Evaluator::table(const Layout& l, int i, int offset, Recompute r) const {
  const StageShape& sh = l.stages[i];
  const SubclusterSpec& sub = cluster_.subclusters[sh.sub];
  const predict::Placement pl = predict::place_block(sub, offset, sh.devices(), sh.tp);
  const int replicas = l.pipelines * sh.dp * sh.cp;
  const Key<10> key = {sh.sub, sh.dp, sh.cp, sh.tp, int(r), l.micro_batch_size, pl.nodes, pl.per_node, int(pl.tp_in_node), replicas};
  if (auto it = tables_.find(key); it != tables_.end()) return *it->second;
  auto t = std::make_unique<Table>();
  const double b = double(l.micro_batch_size) / sh.dp;
  t->time.assign(units_ + 1, 0);
  t->backward.assign(units_ + 1, 0);
  t->params.assign(units_ + 1, 0);
  t->whole.assign(units_ + 1, 0);
  t->act.assign(units_ + 1, 0);
  t->layers.assign(units_ + 1, 0);
  const double layer_act = cost::layer_activation_bytes(longest_, b, sh.tp, sh.cp, r);
  auto unit = [&](UnitKind kind) {
    predict::UnitTimes mean;
    mean.source = cost::Source::profile;
    for (const Length& x : lengths_) {
      const predict::UnitTimes u = predict::unit_times(x.model, x.compute, kind, pl, sh.tp, sh.cp, r, b);
      mean.forward_s += x.share * u.forward_s;
      mean.backward_s += x.share * u.backward_s;
      mean.source = std::max(mean.source, u.source);  // the least exact
    }
    return mean;
  };
  const predict::UnitTimes emb = unit(UnitKind::embedding), head = unit(UnitKind::head);
  const predict::UnitTimes layer = granularity_ == Granularity::layer ? unit(UnitKind::layer) : predict::UnitTimes{};
  const predict::UnitTimes attn = granularity_ == Granularity::sublayer ? unit(UnitKind::attn) : predict::UnitTimes{};
  const predict::UnitTimes mlp = granularity_ == Granularity::sublayer ? unit(UnitKind::mlp) : predict::UnitTimes{};
  for (int u = 0; u < units_; ++u) {
    predict::UnitTimes ut;
    double p = 0, a = 0, layers = 0;
    UnitKind kind = UnitKind::layer;
    if (u == 0) {
      ut = emb, kind = UnitKind::embedding;
    } else if (u == units_ - 1) {
      ut = head, kind = UnitKind::head;
    } else if (granularity_ == Granularity::layer) {
      ut = layer, a = layer_act, layers = 1;
    } else {
      kind = (u - 1) % 2 == 0 ? UnitKind::attn : UnitKind::mlp;
      ut = kind == UnitKind::attn ? attn : mlp, a = layer_act / 2, layers = 0.5;
    }
    p = predict::unit_parameters(model_, kind);
    t->whole[u + 1] = t->whole[u] + predict::whole_parameters(model_, kind);
    t->time[u + 1] = t->time[u] + ut.forward_s + ut.backward_s;
    t->backward[u + 1] = t->backward[u] + ut.backward_s;
    t->params[u + 1] = t->params[u] + p;
    t->act[u + 1] = t->act[u] + a;
    t->layers[u + 1] = t->layers[u] + layers;
  }
  cost::StageShape one;
  one.parameters = sh.tp;  // one parameter per device
  one.tp = sh.tp, one.cp = sh.cp, one.zero_dp = replicas, one.in_flight = 0;
  t->bytes_per_param = cost::stage_memory(model_, one).total();
  t->state.assign(units_ + 1, 0);
  for (int u = 0; u < units_; ++u) {
    const double p = t->sum(t->params, u, u), w = t->sum(t->whole, u, u);
    t->state[u + 1] = t->state[u] + ((p - w) / sh.tp + w) * t->bytes_per_param;
  }
  for (int first : {0, 1})  // [has embedding][has head] for the buffers, [has layers][has head] for the temporaries
    for (int last : {0, 1}) {
      cost::StageShape x;  // one micro-batch in flight, no parameters: what comes on top of them
      x.tp = sh.tp, x.cp = sh.cp, x.sequences = b, x.recompute = r, x.in_flight = 1;
      x.has_embedding = first, x.has_head = last;
      t->buffers[first][last] = cost::stage_memory(longest_, x).stage_buffers;
      x.has_embedding = false, x.layers = first;  // the temporaries: `first` now says whether it has layers
      t->workspace[first][last] = cost::stage_memory(longest_, x).workspace;
    }
  {
    cost::StageShape x;
    x.tp = sh.tp, x.cp = sh.cp, x.sequences = b, x.recompute = r, x.in_flight = 1, x.layers = 1;
    t->recompute_per_layer = cost::stage_memory(longest_, x).recompute;
  }
  t->tied = predict::tied_head_parameters(model_);
  t->capacity = sub.device.usable_memory() * (1 - predict_.memory_headroom);  // predict's StageDetail::limit
  t->device = &sub.device;
  t->fastest_layer = kInf;
  for (int u = 1; u + 1 < units_; ++u) t->fastest_layer = std::min(t->fastest_layer, t->sum(t->time, u, u));
  return *tables_.emplace(key, std::move(t)).first->second;
}

double Evaluator::hop(const StageShape& a, int offset_a, const StageShape& b, int offset_b, int mbs, int sharers) const {
  // Blocks of consecutive devices in node-major order: which devices share a node depends only
  // on the offset within a node, and whether the two stages share nodes on their distance.
  // Two blocks of whole nodes share none wherever they are.
  const int ma = cluster_.subclusters[a.sub].devices_per_node, mb = cluster_.subclusters[b.sub].devices_per_node;
  const bool whole_nodes = offset_a % ma == 0 && a.devices() % ma == 0 && offset_b % mb == 0 && b.devices() % mb == 0;
  const Key<13> key = {a.sub, a.dp, a.cp, a.tp, offset_a % ma, b.sub, b.dp, b.cp, b.tp, offset_b % mb,
                       a.sub == b.sub && !whole_nodes ? offset_b - offset_a : 0, mbs, sharers};
  if (auto it = hops_.find(key); it != hops_.end()) return it->second;
  const Stage from = stage_on(cluster_, a, offset_a, a.devices()), to = stage_on(cluster_, b, offset_b, b.devices());
  double c = 0;  // the estimate charges each direction c_i: the mean of both, over the buckets
  for (const Length& x : lengths_) {
    const predict::Hop h = predict::hop(from, to, x.model, mbs, cluster_, predict_, sharers);
    c += x.share * (h.forward_s + h.backward_s) / 2;
  }
  hops_.emplace(key, c);
  return c;
}

std::pair<LinkSpec, LinkSpec> Evaluator::sync_links(const StageShape& sh, int pipelines, int offset) const {
  // The stage of every pipeline: its gradient-sync rings, whose links depend on the devices of
  // all its copies, its tp (which of them are shard 0) and where its block starts within a
  // node (predict::sync_link reads nothing else): memoised so, every layout's stages ask, and
  // shapes of one tp and size share an entry (the lower bound asks for thousands of shapes on
  // 10,000 devices).
  const Key<4> key = {sh.sub, sh.tp, pipelines * sh.devices(), offset % cluster_.subclusters[sh.sub].devices_per_node};
  if (auto it = sync_links_.find(key); it != sync_links_.end()) return it->second;
  const Stage all = stage_on(cluster_, sh, offset % cluster_.subclusters[sh.sub].devices_per_node, pipelines * sh.devices());
  std::pair<LinkSpec, LinkSpec> links{predict::sync_link(cluster_, {&all}, predict::Rings::per_shard),
                                      predict::sync_link(cluster_, {&all}, predict::Rings::one)};
  sync_links_.emplace(key, links);
  return links;
}

std::optional<Evaluator::Prepared> Evaluator::prepare(const Layout& l) const {
  if (!admissible(l)) return std::nullopt;
  Prepared p;
  p.layout = l;
  p.microbatches = model_.training.global_batch_size / (l.pipelines * l.micro_batch_size);
  const int S = static_cast<int>(l.stages.size());
  // Stage-major allocation: stage i of every pipeline side by side, so a stage's replicas
  // (its gradient sync group) are neighbours.
  std::vector<int> cursor(cluster_.subclusters.size(), 0);
  // gpt ties the token embedding to the head: the first and last stages of every pipeline sync
  // it in one ring (the estimate charges it for gpt only). Its link depends on where both
  // stages' blocks lie: memoised by their shapes and first devices.
  const bool tied = model_.architecture == Architecture::gpt && S > 1;
  Key<11> tied_key{};
  tied_key[0] = l.pipelines;
  for (int i = 0; i < S; ++i) {
    const StageShape& sh = l.stages[i];
    p.offset.push_back(cursor[sh.sub]);
    const std::pair<LinkSpec, LinkSpec> links = sync_links(sh, l.pipelines, cursor[sh.sub]);
    p.sync_link.push_back(links.first);
    p.whole_link.push_back(links.second);
    if (tied && (i == 0 || i == S - 1)) {
      const std::array<int, 5> end = {sh.sub, sh.dp, sh.cp, sh.tp, cursor[sh.sub]};
      std::copy(end.begin(), end.end(), tied_key.begin() + (i == 0 ? 1 : 6));
      p.tied_ring += l.pipelines * sh.devices();
    }
    cursor[sh.sub] += l.pipelines * sh.devices();
    std::vector<const Table*> by_r;
    for (Recompute r : recompute_) by_r.push_back(&table(l, i, p.offset[i], r));
    for (const Table* t : by_r)
      if (std::find(p.distinct.begin(), p.distinct.end(), t) == p.distinct.end()) p.distinct.push_back(t);
    p.tables.push_back(std::move(by_r));
  }
  if (tied) {
    std::optional<LinkSpec> link;
    if (auto it = tied_links_.find(tied_key); it != tied_links_.end()) link = it->second;
    if (!link) {
      // The tied ring in rank order: each pipeline's first stage, then its last.
      std::vector<Stage> ring;
      for (int k = 0; k < l.pipelines; ++k)
        for (int i : {0, S - 1}) {
          const StageShape& sh = l.stages[i];
          ring.push_back(stage_on(cluster_, sh, p.offset[i] + k * sh.devices(), sh.devices()));
        }
      std::vector<const Stage*> members;
      for (const Stage& st : ring) members.push_back(&st);
      link = predict::sync_link(cluster_, members, predict::Rings::one);
      tied_links_.emplace(tied_key, *link);
    }
    p.tied_link = *link;
  }
  for (int i = 0; i + 1 < S; ++i) {
    // The k pipelines' copies of stage i lie side by side, from device offset[i] on, g devices
    // each: those on one node share its NIC. Copy k reaches node n when its first device lies
    // before the node's end and its last at or after the node's start.
    const int M = cluster_.subclusters[l.stages[i].sub].devices_per_node, g = l.stages[i].devices(), off = p.offset[i];
    int sharers = 1;
    for (int n = off / M; n <= (off + l.pipelines * g - 1) / M; ++n) {
      const int first = n * M <= off ? 0 : (n * M - off) / g, last = std::min(l.pipelines - 1, ((n + 1) * M - 1 - off) / g);
      sharers = std::max(sharers, last - first + 1);
    }
    p.hop.push_back(hop(l.stages[i], p.offset[i], l.stages[i + 1], p.offset[i + 1], l.micro_batch_size, sharers));
    p.cross.push_back(l.stages[i].sub != l.stages[i + 1].sub);
  }
  return p;
}

std::optional<Candidate> Evaluator::solve(const Prepared& p, const std::vector<int>* fixed, double cutoff, Cut& cut) const {
  const Layout& l = p.layout;
  const int S = static_cast<int>(l.stages.size());
  const int U = units_;
  const int R = static_cast<int>(recompute_.size());
  const int m = p.microbatches;

  // Warm-up counts for a t_max (h-1f1b depends on it through c/t_max).
  auto warmups = [&](double tau) {
    schedule::WarmupInput w;
    w.kind = l.schedule;
    w.num_microbatches = m;
    w.stage_s.assign(S, tau);
    w.transfer_s = p.hop;
    w.crosses_subcluster = p.cross;
    w.epsilon = predict_.epsilon;
    return schedule::warmup_counts(w);
  };
  // The first units stage i can start at, from the last feasibility sweep (feasible, below):
  // the DP at the same t_max visits only those.
  std::vector<std::pair<int, int>> range(S, {0, U});
  // DP: F[i][k] = min Σ t over stages i.. covering units k..U-1 with every t <= tau. Sized at
  // the first run: most layouts a refinement tries are cut by one feasibility test before.
  std::vector<double> F;
  std::vector<int> end, pick;
  auto at = [U](int i, int k) { return static_cast<std::size_t>(i) * (U + 1) + k; };
  auto run_dp = [&](double tau, const std::vector<int>& N) {
    if (F.empty()) {
      F.resize(static_cast<std::size_t>(S + 1) * (U + 1));
      end.assign(F.size(), -1), pick.assign(F.size(), -1);
    }
    std::fill(F.begin(), F.end(), kInf);
    F[at(S, U)] = 0;
    int covered = U;  // the first unit from which stages i + 1.. cover the rest
    for (int i = S - 1; i >= 0; --i) {
      const int k_lo = fixed ? (*fixed)[i] : std::max(i, range[i].first),
                k_hi = fixed ? (*fixed)[i] : std::min(U - (S - i), range[i].second);
      for (int k = k_lo; k <= k_hi; ++k) {
        const int e_lo = std::max(fixed ? (i + 1 < S ? (*fixed)[i + 1] - 1 : U - 1) : k, covered - 1);
        const int e_hi = fixed ? e_lo : (i == S - 1 ? U - 1 : U - (S - i - 1) - 1);
        double best = kInf;
        for (int e = std::max(e_lo, k); e <= e_hi; ++e) {
          // Time and memory only grow with e: once no option fits, none does further on.
          bool any = false;
          for (int r = 0; r < R; ++r) {
            const Table& t = *p.tables[i][r];
            const double time = t.sum(t.time, k, e);
            if (time > tau) continue;
            if (t.memory(k, e, N[i], e == U - 1) > t.capacity) continue;
            any = true;
            const double rest = F[at(i + 1, e + 1)];
            if (rest != kInf && time + rest < best) best = time + rest, end[at(i, k)] = e, pick[at(i, k)] = r;
            break;  // options are ordered by cost: the first that fits is the fastest
          }
          if (!any) break;
        }
        F[at(i, k)] = best;
      }
      covered = U + 1;
      for (int k = k_lo; k <= k_hi; ++k)
        if (F[at(i, k)] < kInf) {
          covered = k;
          break;
        }
      if (covered > U) return kInf;
    }
    return F[at(0, 0)];
  };
  // The estimate of the split the DP found. Per stage: its time, its backward and the micro-
  // batches in flight its memory holds (predict's cap on warm-ups); kept across calls.
  std::vector<double> stage_t(S), back(S);
  std::vector<int> hold(S);
  sim::PipelineInput pipe;  // the split's pipeline for the simulator: one copy, its buffers kept
  pipe.num_microbatches = m;
  // What estimate() did: the split was estimated before (rungs of the t_max ladder often find
  // the same one), eq. 13's bound alone was already `beat` or more (the simulation could only
  // raise it; that bound is then the estimate), or the split was simulated.
  enum class Estimated { again, beaten, simulated };
  std::vector<std::vector<int>> seen;  // first units, then recomputations, of the splits estimated
  auto estimate = [&](Candidate& c, double beat) {
    c.first_unit.clear();
    c.recompute.clear();
    double t_max = 0, sum = 0, tail = 0;
    // The last micro-batch's backward leaves stage i this long before it leaves stage 0: the
    // backwards and hops of the stages before it. The gradient sync and optimizer step of stage
    // i start then (sim.cpp: after the stage's own last backward, as the runtime runs them).
    double slack = 0;
    const bool gpt_ends = model_.architecture == Architecture::gpt && S > 1;  // gpt ties the token embedding to the head
    const double wte = gpt_ends ? double(model_.vocab_size) * model_.hidden_size : 0;
    const double tied_s = gpt_ends ? predict::tied_sync_s(model_, wte, p.tied_ring, p.tied_link) : 0;
    struct End {
      double own_done = 0, last_backward = 0, optimizer = 0;  // gpt's tied ends: its own buckets reduced; its last backward
    } ends[2];
    int k = 0;
    for (int i = 0; i < S; ++i) {
      const int e = end[at(i, k)], r = pick[at(i, k)];
      const Table& tb = *p.tables[i][r];
      c.first_unit.push_back(k);
      c.recompute.push_back(recompute_[r]);
      stage_t[i] = tb.sum(tb.time, k, e);
      t_max = std::max(t_max, stage_t[i]);
      sum += stage_t[i] + (i + 1 < S ? 2 * p.hop[i] : 0);
      const int replicas = l.pipelines * l.stages[i].dp * l.stages[i].cp;
      const double tied_head = e == U - 1 && k > 0 ? tb.tied : 0;  // gpt's head weights, held by the last stage too
      // A stage with gpt's embedding or head syncs the tied embedding with the other end's.
      const bool tied = gpt_ends && (i == 0 || i == S - 1);
      const double own_wte = tied && k == 0 ? wte : 0;
      const double own = predict::stage_sync_s(model_, tb.sum(tb.params, k, e) - own_wte, tb.sum(tb.whole, k, e) - own_wte,
                                               l.stages[i].tp, replicas, p.sync_link[i], p.whole_link[i]);
      const double last_b = tb.sum(tb.backward, k, e);
      back[i] = last_b;
      const double one = tb.memory(k, e, 1, e == U - 1);  // predict's cap on warm-ups
      hold[i] = schedule::held_in_flight(tb.capacity, one, tb.memory(k, e, 2, e == U - 1) - one, m);
      const double opt = predict::optimizer_s(compute_, model_, *tb.device, l.stages[i].tp, tb.sum(tb.params, k, e) + tied_head,
                                              tb.sum(tb.whole, k, e) + tied_head, model_.training.zero_stage >= 1 ? replicas : 1);
      // Stage i's buckets may start at `ready` (its last backward ends at −slack), one after
      // the other. gpt's tied embedding is the last bucket of both ends (predict::sync_buckets):
      // it starts once both have reduced their own (below the loop).
      const double ready = -slack - (predict_.overlap_sync ? last_b : 0);
      if (tied) {
        ends[i == 0 ? 0 : 1] = {ready + own, -slack, opt};
      } else {
        tail = std::max(tail, std::max(-slack, ready + own) + opt);
      }
      slack += last_b + (i + 1 < S ? p.hop[i] : 0);
      k = e + 1;
    }
    if (gpt_ends) {
      const double tied_done = std::max(ends[0].own_done, ends[1].own_done) + tied_s;
      for (const End& x : ends) tail = std::max(tail, std::max(x.last_backward, tied_done) + x.optimizer);
    }
    // The warm-ups the plan runs (predict.cpp): the schedule's for the split's own times
    // (h-1f1b's depend on c/t_max; those of the t_max bound the split was searched under are
    // fewer when that bound lies above the split's t_max; issue 20: a random plan of three
    // 0.14 s hops around 0.03 s stages, estimated at N = 13, 12, 11 and simulated at 16, 16,
    // 12: 0.66 of its simulated time), capped as predict caps them by what each stage's
    // memory holds (the DP's splits hold the searched N; the split's own may be more).
    schedule::WarmupInput w;
    w.kind = l.schedule;
    w.num_microbatches = m;
    w.stage_s = stage_t;
    w.transfer_s = p.hop;
    w.crosses_subcluster = p.cross;
    w.memory_limit = hold;
    w.epsilon = predict_.epsilon;
    const std::vector<int> N = schedule::warmup_counts(w);  // the same for the same split
    std::vector<int> key = c.first_unit;
    for (Recompute r : c.recompute) key.push_back(int(r));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) return Estimated::again;
    seen.push_back(std::move(key));
    // The pipeline as the simulator runs it (sim.cpp's DAG: these stage times, hops both ways
    // and warm-ups; predict simulates the plan so), and never below eq. 13's (m − 1)·t_max +
    // Σ t_i + Σ 2c_i (a hop paces like a stage), which the cutoff's pruning and the t_max
    // ladder take as every split's least estimate. Issue 20: eq. 12's steady state charged a
    // round trip per cycle where warm-ups cover it (exp3's 8 pipelines of 10 stages, stage 0 with
    // 18 warm-ups against a 1.1 s round trip: estimated 7.77-7.83 s, simulated 7.48-7.54), and
    // missed a slow hop's chain of activations then gradients (midsize-48: 3.156 against 3.383).
    // The simulated makespan falls below eq. 13 when the faster stages hide behind the slowest
    // one's warm-ups (two stages of 2 and 1 per micro-batch, 1F1B: 2m against 2m + 1): there
    // the estimate errs high as before, and nowhere further from the simulation than eq. 12.
    double slowest = t_max;
    pipe.stages.resize(S);
    for (int i = 0; i < S; ++i) {
      sim::StageCosts& st = pipe.stages[i];
      st.forward_s = stage_t[i] - back[i];
      st.backward_s = back[i];
      st.send_forward_s = st.send_backward_s = i + 1 < S ? p.hop[i] : 0;
      if (i + 1 < S) slowest = std::max(slowest, p.hop[i]);
    }
    c.estimate_s = sum + (m - 1) * slowest + tail;
    if (c.estimate_s >= beat) return Estimated::beaten;
    pipe.warmup = N;
    const auto run = sim::simulate_pipeline(pipe);
    const double makespan = run ? run->makespan_s : kInf;  // warm-ups from schedule:: never deadlock
    c.estimate_s = std::max(makespan + tail, c.estimate_s);
    return Estimated::simulated;
  };

  // Whether some split has every t_i <= tau, exactly and in O(S·U·R): the units a stage can
  // hold from unit k form a run k..reach(k) that grows with k (time and memory only grow with
  // a stage's units), so the first units that stages 0..i can leave to stage i+1 are a union
  // of runs, swept with a difference array. Only the first units stage i can start at
  // (starts[lo..hi], at most U - (S - i): each later stage holds a unit) are visited: the
  // cut test of a layout that cannot beat the incumbent is this one call (issue 20).
  std::vector<int> ends(U + 2);
  std::vector<char> starts(U + 1);
  // Before the sweep, a count: a stage holds whole units, each middle unit taking at least its
  // table's fastest_layer (the cheapest recomputation option's; the embedding and the head at
  // least nothing), so stage i holds at most floor(tau / fastest_layer) of them (+1 for the
  // first's embedding and the last's head); if all stages together hold fewer than U units no
  // split fits. It rules out only what the sweep would (the slack covers the prefix sums'
  // rounding), without the sweep: issue 20, the 102,498 evaluations of a search on 10,000
  // devices replayed, 112,000 of their 334,000 tests failed, 81% after the sweep's last stage,
  // and this count rules out 90,000 of them.
  auto could_cover = [&](double tau) {
    long held = 0;
    for (int i = 0; i < S && held < U; ++i) {
      const Table& t = *p.tables[i][0];
      const double n = t.fastest_layer > 0 ? (tau + 1e-9 * t.time[U]) / t.fastest_layer : kInf;
      held += n >= U ? U : long(n) + (i == 0) + (i == S - 1);
    }
    return held >= U;
  };
  auto feasible = [&](double tau, const std::vector<int>& N) {
    if (fixed) return run_dp(tau, N) < kInf;
    if (!could_cover(tau)) return false;
    std::fill(starts.begin(), starts.end(), 0);
    starts[0] = 1;
    int lo = 0, hi = 0;  // the first and the last unit stage i may start at
    for (int i = 0; i < S; ++i) {
      const Table* const* t = p.tables[i].data();
      auto fits = [&](int k, int e) {
        for (int r = 0; r < R; ++r)
          if (t[r]->sum(t[r]->time, k, e) <= tau && t[r]->memory(k, e, N[i], e == U - 1) <= t[r]->capacity) return true;
        return false;
      };
      hi = std::min(hi, U - (S - i));
      range[i] = {lo, hi};
      std::fill(ends.begin() + lo, ends.end(), 0);
      int last = -1;  // the last unit any run of stage i reaches
      for (int k = lo, e = lo - 1; k <= hi; ++k) {
        e = std::max(e, k - 1);
        while (e + 1 < U && fits(k, e + 1)) ++e;  // e: the last unit of the longest run from k
        if (starts[k] && e >= k) ++ends[k + 1], --ends[e + 2], last = e;
      }
      if (last < 0) return false;
      std::fill(starts.begin() + lo, starts.begin() + hi + 1, 0);
      int open = 0, first = -1;
      for (int k = lo + 1; k <= last + 1; ++k) {
        open += ends[k];
        starts[k] = open > 0;
        if (open > 0 && first < 0) first = k;
      }
      lo = first, hi = last + 1;
    }
    return starts[U] != 0;
  };
  Candidate best;
  best.layout = l;
  best.estimate_s = kInf;
  // What a split must beat: the best so far, and the caller's cutoff.
  auto target = [&] { return std::min(best.estimate_s, cutoff); };
  bool beyond = false;  // a split fit whose estimate could not get below the cutoff
  auto fit = [&](double tau) { return feasible(tau, warmups(tau)); };
  auto try_tau = [&](double tau) {
    const std::vector<int> N = warmups(tau);
    // The sweep first (it bounds the DP's starts); a fixed split's sweep is the DP itself.
    if ((!fixed && !feasible(tau, N)) || run_dp(tau, N) == kInf) return;
    Candidate c;
    c.layout = l;
    switch (estimate(c, target())) {
      case Estimated::again: break;
      case Estimated::beaten: beyond |= c.estimate_s >= cutoff; break;
      case Estimated::simulated:
        if (c.estimate_s < best.estimate_s) best = std::move(c);
    }
  };
  // Every split pays, besides (m − 1) times its t_max, at least `fixed_cost`: each unit's fastest time
  // on any stage (Σ_i t_i) and the hops there and back (Σ_i 2c_i, fixed by the layout). The
  // step after the last backward may hide behind the drain of the stages before it: it adds
  // nothing certain.
  // Each unit's least time on any stage: their sum, and the most of them (t_max's least value,
  // with the sum over S, below).
  double fastest = 0, slowest_unit = 0;
  for (int u = 0; u < U; ++u) {
    double t = kInf;
    for (const Table* x : p.distinct) t = std::min(t, x->sum(x->time, u, u));
    fastest += t, slowest_unit = std::max(slowest_unit, t);
  }
  double fixed_cost = fastest, slowest_hop = 0;
  for (double c : p.hop) fixed_cost += 2 * c, slowest_hop = std::max(slowest_hop, c);
  // Bounds of t_max: no stage is faster than its fastest unit set, none slower than all units.
  double top = 0;
  for (const Table* x : p.distinct) top = std::max(top, x->time[U]);
  top *= 1.0000001;
  // With a cutoff, only splits with (m − 1)·t_max + fixed_cost below it matter (HAPT §5.2's
  // pruning, from above): when none has t_max that small — one feasibility test, the only
  // one when it fails (most layouts a refinement tries) — the layout cannot beat the cutoff,
  // and otherwise t_max is searched below that bound only.
  bool bounded = false;
  if (cutoff < kNoCutoff && m > 1) {
    const double bound = (cutoff - fixed_cost) / (m - 1);
    // A hop paces the pipeline too.
    if (bound <= 0 || bound < slowest_hop || (bound < top && !fit(bound))) {
      cut = Cut::infeasible;
      return std::nullopt;
    }
    bounded = bound < top;
    top = std::min(top, bound);
  }
  if (!bounded && !fit(top)) return std::nullopt;
  // Below t_max's least value no split fits: a stage holding a unit takes at least the
  // unit's fastest time, and the S stages share the fastest time of them all.
  const double least = std::max(slowest_unit, fastest / S);
  // The smallest t_max at which a split fits, bisected from there: hi fits, lo does not (or is
  // t_max's least value).
  double lo = std::min(least * (1 - 1e-9), top), hi = top;
  for (int it = 0; it < 40 && hi - lo > 1e-3 * hi; ++it) {
    const double mid = (lo + hi) / 2;
    (fit(mid) ? hi : lo) = mid;
  }
  try_tau(hi);
  // Upward from the smallest feasible t_max while splits of larger t_max can still beat the
  // best (HAPT §5.2's t_E = T(t_S)/B), on a geometric ladder; a rung finds splits with t_max
  // above the rung below.
  double below = hi;
  for (double tau = hi * 1.01; (m - 1) * below + fixed_cost < target() && tau <= kLadderTop * hi; below = tau, tau *= 1.05)
    try_tau(tau);
  if (m > 1 && (m - 1) * hi * kLadderTop + fixed_cost < target()) try_tau((target() - fixed_cost) / (m - 1));
  // No bound on t_max at all, unless that cannot beat the best either.
  if ((m - 1) * lo + fixed_cost < target()) try_tau(top);
  if (best.estimate_s == kInf) {
    if (beyond) cut = Cut::estimated;
    return std::nullopt;
  }
  return best;
}

std::vector<Candidate> Evaluator::evaluate(const Layout& layout, const std::vector<ScheduleKind>& schedules,
                                           const std::vector<int>* first_unit, double cutoff, bool* cut) const {
  if (first_unit) {
    const auto& f = *first_unit;
    if (f.size() != layout.stages.size() || f.empty() || f[0] != 0) return {};
    for (std::size_t i = 1; i < f.size(); ++i)
      if (f[i] <= f[i - 1] || f[i] >= units_) return {};
  }
  auto p = prepare(layout);
  if (!p) return {};
  if (lower_bound(*p) >= cutoff) {
    if (cut) *cut = true;
    return {};
  }
  std::vector<Candidate> out;
  // The schedule only changes the warm-ups, and 1F1B's S − i are each schedule's least
  // (schedule::warmup_counts): a stage holding more micro-batches needs more memory, so where
  // no split fits at 1F1B's warm-ups (the feasibility test at the t_max that would reach the
  // cutoff, the same for every schedule) none fits at another's.
  // So 1F1B runs first; the candidates come in the order of `schedules`.
  auto run = [&](ScheduleKind kind, Cut& why) {
    p->layout.schedule = kind;
    auto c = solve(*p, first_unit, cutoff, why);
    if (cut && why != Cut::no) *cut = true;
    return c;
  };
  const auto one = std::find(schedules.begin(), schedules.end(), ScheduleKind::one_f_one_b);
  std::optional<Candidate> one_found;
  if (one != schedules.end()) {
    Cut why = Cut::no;
    one_found = run(*one, why);
    if (why == Cut::infeasible) return out;
  }
  for (auto it = schedules.begin(); it != schedules.end(); ++it) {
    Cut why = Cut::no;
    auto c = it == one ? std::move(one_found) : run(*it, why);
    if (c) out.push_back(std::move(*c));
  }
  return out;
}

std::optional<Candidate> Evaluator::best_split(const Layout& layout) const {
  auto found = evaluate(layout, {layout.schedule});
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

std::optional<double> Evaluator::bound(const Layout& layout) const {
  auto p = prepare(layout);
  if (!p) return std::nullopt;
  return lower_bound(*p);
}

double Evaluator::lower_bound(const Prepared& p) const {
  double rate = 0;  // layers per second of all stages together
  for (const auto& by_r : p.tables) {
    const double layer = by_r[0]->fastest_layer;  // the cheapest recomputation option
    if (layer > 0 && layer < kInf) rate += 1 / layer;
  }
  const double layers = units_ - 2;
  return rate > 0 ? (p.microbatches - 1) * layers / rate : 0;
}

Plan Evaluator::to_plan(const Candidate& c) const {
  Plan plan;
  plan.model = model_;
  plan.cluster = cluster_;
  plan.schedule = c.layout.schedule;
  plan.granularity = granularity_;
  const Layout& l = c.layout;
  const int S = static_cast<int>(l.stages.size());
  std::vector<int> cursor(cluster_.subclusters.size(), 0);
  std::vector<int> base(S);
  for (int i = 0; i < S; ++i) base[i] = cursor[l.stages[i].sub], cursor[l.stages[i].sub] += l.pipelines * l.stages[i].devices();
  for (int k = 0; k < l.pipelines; ++k) {
    Pipeline p;
    p.micro_batch_size = l.micro_batch_size;
    p.num_microbatches = model_.training.global_batch_size / (l.pipelines * l.micro_batch_size);
    for (int i = 0; i < S; ++i) {
      const StageShape& sh = l.stages[i];
      const SubclusterSpec& sub = cluster_.subclusters[sh.sub];
      Stage st;
      st.subcluster = sub.name;
      st.first = c.first_unit[i];
      st.last = i + 1 < S ? c.first_unit[i + 1] - 1 : units_ - 1;
      st.tp = sh.tp, st.cp = sh.cp, st.dp = sh.dp;
      st.recompute = c.recompute[i];
      st.devices = block(sub, base[i] + k * sh.devices(), sh.devices());
      p.stages.push_back(std::move(st));
    }
    plan.pipelines.push_back(std::move(p));
  }
  spread_buckets(plan);  // cannot fail: admissible() checked each bucket fills whole micro-batches
  return plan;
}

}  // namespace het::search
