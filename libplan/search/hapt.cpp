// HAPT's inter-op planner (HAPT §5.2), generalised to any number of subclusters.
//
// One pipeline. Each stage runs on a submesh of one subcluster of size (1,1),(1,2),(1,4)..
// (1,M),(2,M)..(N,M) (M devices per node; on subclusters of four or more nodes only whole
// nodes, and on those of more than 64 nodes whole blocks of 2^j nodes, to keep the state
// space of large clusters small), with the best intra-op option (dp × tp = the submesh) for
// its units. Stages of one subcluster are contiguous; the subcluster order is enumerated (all
// orders up to three subclusters; beyond, the orders by memory and by compute, descending).
// For a candidate t_max a DP from the last unit backwards over (first unit covered,
// subcluster, slots used there: devices, nodes or blocks) minimises Σ (t_i + 2 c_i) subject
// to t_i ≤ t_max and the schedule's memory constraint (eq. 14-24): the warm-up count of a new
// stage is the next stage's plus δ of their hop (h-1f1b), +1 (1f1b), as HAPT keeps N(s, k, ..)
// along the optimal substructure. t_max is searched from the smallest feasible value upward
// (bidirectional pruning, §5.2); the stage shapes found go through the common evaluator for
// the final split and estimate. Candidate t_max values are evaluated in parallel (oneTBB).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <tbb/parallel_for.h>

#include "predict/stage_cost.hpp"
#include "search/algorithms.hpp"

namespace het::search {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Mesh {
  int devices;
  int dp, tp;
  int slots;  // devices / the subcluster's allocation slot (slot_of)
};

// The allocation slot of a subcluster, in devices: a device on subclusters of fewer than four
// nodes; else whole nodes, 2^j of them, the fewest that leave at most kSlots slots — the DP
// counts what is used in slots and its meshes are whole slots, which bounds its state space
// on large clusters (issue 20: on 10,000 devices a solve over single nodes took a second).
constexpr int kSlots = 64;
int slot_of(const SubclusterSpec& s) {
  if (s.nodes < 4) return 1;
  int nodes = 1;
  while (s.nodes / nodes > kSlots) nodes *= 2;
  return nodes * s.devices_per_node;
}

std::vector<Mesh> meshes(const Evaluator& eval, int sub, int mbs) {
  const SubclusterSpec& s = eval.cluster().subclusters[sub];
  const ModelSpec& m = eval.model();
  const int M = s.devices_per_node, slot = slot_of(s);
  std::vector<int> sizes;
  if (slot == 1)
    for (int g = 1; g < M; g *= 2) sizes.push_back(g);
  const int unit = std::max(slot, M);  // whole nodes, or whole slots
  for (int n = 1; n * unit <= s.num_devices(); ++n) sizes.push_back(n * unit);
  std::vector<Mesh> out;
  for (int g : sizes)
    for (int tp = 1; tp <= std::min(g, M); tp *= 2) {
      if (g % tp || M % tp || m.num_attention_heads % tp || m.num_kv_heads % tp) continue;
      if (mbs % (g / tp)) continue;
      out.push_back({g, g / tp, tp, g / slot});
    }
  return out;
}

struct Cell {
  double cost = kInf;  // Σ (t_i + 2 c_i) of the suffix
  int warmup = 0;      // warm-up count of the suffix's first stage
  int first_mesh = -1, first_offset = 0, first_sub = -1, first_end = -1;  // the suffix's first stage (offset in slots)
  int next = -1;       // index of the successor cell (the rest of the suffix)
};

class HaptDp {
 public:
  HaptDp(Work& w, std::vector<int> order, int mbs, ScheduleKind kind)
      : w_(w), order_(std::move(order)), mbs_(mbs), kind_(kind), U_(w.eval.num_units()) {
    const ClusterSpec& c = w.eval.cluster();
    m_ = w.eval.model().training.global_batch_size / mbs;
    for (int j : order_) {
      meshes_.push_back(meshes(w.eval, j, mbs));
      slot_.push_back(slot_of(c.subclusters[j]));
      capacity_.push_back(c.subclusters[j].num_devices() / slot_.back());
    }
    tables_.resize(order_.size());
    base_.assign(order_.size() + 1, 0);
    for (std::size_t q = 0; q < order_.size(); ++q) base_[q + 1] = base_[q] + capacity_[q] + 1;
  }

  // Stage shapes of the best pipeline under t_max = tau, or empty.
  std::vector<StageShape> solve(double tau) {
    w_.count();
    const std::size_t states = static_cast<std::size_t>(U_ + 1) * base_.back();
    std::vector<Cell> cell(states);
    auto id = [&](int k, std::size_t q, int used) { return static_cast<std::size_t>(k) * base_.back() + base_[q] + used; };
    for (std::size_t q = 0; q < order_.size(); ++q) cell[id(U_, q, 0)].cost = 0;
    // Cells in order of decreasing k; within a k any order (transitions lower k).
    for (int k = U_; k > 0; --k) {
      for (std::size_t q = 0; q < order_.size(); ++q) {
        // One solve of many subclusters of many devices takes seconds: the deadline ends it
        // (no pipeline; the callers stop when the time is up).
        if (w_.expired()) return {};
        for (int used = 0; used <= capacity_[q]; ++used) {
          const Cell& from = cell[id(k, q, used)];
          if (from.cost == kInf) continue;
          // A new stage before this suffix: on subcluster q (after `used`) or an earlier one.
          for (std::size_t q2 = 0; q2 <= q; ++q2) {
            const int sub = order_[q2];
            const int already = q2 == q ? used : 0;
            if (q2 < q && from.first_sub < 0) continue;  // an empty suffix starts in its own subcluster
            for (std::size_t mi = 0; mi < meshes_[q2].size(); ++mi) {
              const Mesh& mesh = meshes_[q2][mi];
              if (already + mesh.slots > capacity_[q2]) continue;
              const int offset = capacity_[q2] - already - mesh.slots;  // in slots, allocated from the back
              extend(cell, id(k, q, used), k, sub, mesh, offset, tau, [&](int k2) { return id(k2, q2, already + mesh.slots); });
            }
          }
        }
      }
    }
    // Best complete pipeline.
    std::size_t best = states;
    for (std::size_t q = 0; q < order_.size(); ++q)
      for (int used = 1; used <= capacity_[q]; ++used)
        if (cell[id(0, q, used)].cost < (best == states ? kInf : cell[best].cost)) best = id(0, q, used);
    std::vector<StageShape> out;
    for (std::size_t at = best; at != states && cell[at].first_sub >= 0; at = static_cast<std::size_t>(cell[at].next)) {
      const Cell& c = cell[at];
      const Mesh& mesh = meshes_[position(c.first_sub)][static_cast<std::size_t>(c.first_mesh)];
      out.push_back({c.first_sub, mesh.dp, 1, mesh.tp});
    }
    return out;
  }

 private:
  std::size_t position(int sub) const {
    return static_cast<std::size_t>(std::find(order_.begin(), order_.end(), sub) - order_.begin());
  }

  template <class To>
  void extend(std::vector<Cell>& cell, std::size_t from_id, int k, int sub, const Mesh& mesh, int offset, double tau,
              To to_id) {
    const Cell& from = cell[from_id];
    // Not even the last unit fits within t_max (the cheapest option is the fastest).
    if (const StageTable& t = table(sub, mesh, offset, 0); t.sum(t.time, k - 1, k - 1) > tau) return;
    // Hop to the suffix's first stage, and the new stage's warm-up count.
    double c = 0;
    int warmup = 1;
    if (from.first_sub >= 0) {
      c = hop(sub, mesh, offset, from);
      if (c > tau) return;  // the H-1F1B communication constraint, C(i) <= t_max (§5.2)
      const bool cross = sub != from.first_sub;
      int delta = 1;
      if (kind_ == ScheduleKind::h_1f1b) {
        const double eps = w_.eval.predict_options().epsilon;
        delta = c <= eps * tau ? 1 : c <= tau / 2 ? 2 : c <= tau ? 3 : static_cast<int>(std::ceil(1 + 2 * c / tau));
      } else if (kind_ == ScheduleKind::eager_1f1b) {
        delta = 2;
      } else if (kind_ == ScheduleKind::virtual_1f1b) {
        delta = cross ? 2 : 1;
      } else if (kind_ == ScheduleKind::gpipe) {
        delta = 0;
      }
      warmup = kind_ == ScheduleKind::gpipe ? m_ : std::min(m_, from.warmup + delta);
    }
    const auto& options = w_.eval.recompute_options();
    for (std::size_t ri = 0; ri < options.size(); ++ri) {
      const StageTable& t = table(sub, mesh, offset, ri);
      bool any = false;
      for (int k2 = k - 1; k2 >= 0; --k2) {  // the new stage holds units k2 .. k-1
        const double time = t.sum(t.time, k2, k - 1);
        if (time > tau) break;
        if (t.memory(k2, k - 1, warmup, k == U_) > t.capacity) break;
        any = true;
        Cell& to = cell[to_id(k2)];
        const double cost = from.cost + time + 2 * c;
        if (cost < to.cost) {
          to.cost = cost;
          to.warmup = warmup;
          to.first_sub = sub;
          to.first_mesh = static_cast<int>(&mesh - meshes_[position(sub)].data());
          to.first_offset = offset;
          to.first_end = k - 1;
          to.next = static_cast<int>(from_id);
        }
      }
      if (any) break;  // the cheaper recomputation option fits: the costlier ones cannot do better
    }
  }

  // The evaluator's table, remembered here without the evaluator's lock (one DP, one thread).
  const StageTable& table(int sub, const Mesh& mesh, int offset, std::size_t r) {
    const std::size_t q = position(sub), R = w_.eval.recompute_options().size();
    auto& slots = tables_[q];
    if (slots.empty()) slots.assign(meshes_[q].size() * std::size_t(capacity_[q] + 1) * R, nullptr);
    const std::size_t at = (std::size_t(&mesh - meshes_[q].data()) * std::size_t(capacity_[q] + 1) + std::size_t(offset)) * R + r;
    if (!slots[at]) {
      Layout one;
      one.micro_batch_size = mbs_;
      one.stages = {{sub, mesh.dp, 1, mesh.tp}};
      slots[at] = &w_.eval.table(one, 0, offset * slot_[q], w_.eval.recompute_options()[r]);
    }
    return *slots[at];
  }

  double hop(int sub, const Mesh& mesh, int offset, const Cell& next) {
    const Mesh& nm = meshes_[position(next.first_sub)][static_cast<std::size_t>(next.first_mesh)];
    // (subcluster, mesh, offset) of both ends: this DP's own cache before the evaluator's. Stages
    // of whole nodes never share a node, so where both ends are whole nodes the hop does not
    // depend on their offsets (the evaluator's key says the same).
    const bool nodes = slot_[position(sub)] > 1 && slot_[position(next.first_sub)] > 1;
    auto end = [&](int s, std::ptrdiff_t m, int off) {
      return std::uint64_t(s) << 48 | std::uint64_t(m) << 24 | std::uint64_t(nodes ? 0 : off);
    };
    const std::uint64_t a = end(sub, &mesh - meshes_[position(sub)].data(), offset),
                        b = end(next.first_sub, next.first_mesh, next.first_offset);
    HopSlot& slot = find_hop(a, b);
    if (slot.used) return slot.seconds;
    const double t = w_.eval.hop({sub, mesh.dp, 1, mesh.tp}, offset * slot_[position(sub)], {next.first_sub, nm.dp, 1, nm.tp},
                                 next.first_offset * slot_[position(next.first_sub)], mbs_, 1);
    slot = {a, b, t, true};
    if (2 * ++hop_count_ > hops_.size()) grow_hops();
    return t;
  }

  // The hop cache: open addressing with linear probing in a power-of-two table at most half
  // full (a lookup of the DP's inner loop: no division, no chain of nodes; issue 20, 10,000
  // devices: a third of this DP's time went to std::unordered_map's).
  struct HopSlot {
    std::uint64_t a = 0, b = 0;
    double seconds = 0;
    bool used = false;
  };
  HopSlot& find_hop(std::uint64_t a, std::uint64_t b) {
    const std::size_t mask = hops_.size() - 1;
    std::size_t at = std::size_t((a * 0x9e3779b97f4a7c15ULL ^ b) * 0xbf58476d1ce4e5b9ULL >> 20) & mask;
    while (hops_[at].used && (hops_[at].a != a || hops_[at].b != b)) at = (at + 1) & mask;
    return hops_[at];
  }
  void grow_hops() {
    std::vector<HopSlot> old(hops_.size() * 2);
    old.swap(hops_);
    for (const HopSlot& h : old)
      if (h.used) find_hop(h.a, h.b) = h;
  }

  Work& w_;
  std::vector<int> order_;
  int mbs_;
  ScheduleKind kind_;
  int U_;
  int m_ = 1;
  std::vector<std::vector<Mesh>> meshes_;
  std::vector<int> slot_;      // per subcluster position: devices per allocation slot
  std::vector<int> capacity_;  // per subcluster position: slots
  std::vector<std::size_t> base_;
  std::vector<HopSlot> hops_ = std::vector<HopSlot>(1024);  // a power of two
  std::size_t hop_count_ = 0;
  std::vector<std::vector<const StageTable*>> tables_;  // per subcluster position: [mesh][offset][r], filled lazily
};

std::vector<std::vector<int>> orders(const ClusterSpec& c) {
  const int C = static_cast<int>(c.subclusters.size());
  std::vector<int> all(C);
  for (int j = 0; j < C; ++j) all[j] = j;
  std::vector<std::vector<int>> out;
  if (C <= 3) {
    do out.push_back(all);
    while (std::next_permutation(all.begin(), all.end()));
    return out;
  }
  auto by = [&](auto key) {
    std::vector<int> o = all;
    std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key(a) > key(b); });
    return o;
  };
  out.push_back(by([&](int j) { return c.subclusters[j].device.memory; }));
  out.push_back(by([&](int j) { return c.subclusters[j].device.peak; }));
  if (out[1] == out[0]) out.pop_back();
  return out;
}

}  // namespace

void run_hapt(Work& w) {
  // Pipeline micro-batches: b sequences per replica times a power of two (a stage of dp d
  // splits the micro-batch d ways), dividing the global batch.
  const int B = w.eval.model().training.global_batch_size;
  std::set<int> sizes;
  for (int b : w.micro_batch_sizes)
    for (int d = 1; b * d <= B; d *= 2)
      if (B % (b * d) == 0) sizes.insert(b * d);
  // Each (subcluster order, micro-batch, schedule) is searched on its own (its bisection is
  // sequential), several in parallel.
  struct Combo {
    std::vector<int> order;
    int mbs;
    ScheduleKind kind;
  };
  // Every subcluster order at one micro-batch before the next micro-batch: stopped early (auto
  // stops its members once the search has converged), hapt has tried each order at the small
  // micro-batches, where its best plans are, and not one order at every size up to the global
  // batch (issue 20: midsize-24's best plans come from the second order, which it reached
  // after 2.5 s).
  std::vector<Combo> combos;
  const auto subcluster_orders = orders(w.eval.cluster());
  for (int mbs : sizes)
    for (const auto& order : subcluster_orders)
      for (ScheduleKind kind : w.schedules) combos.push_back({order, mbs, kind});
  // In waves of four: within a wave the combinations run in parallel against the k best kept
  // when the wave began (the earlier waves' plans), so what prunes them does not depend on
  // how they interleave.
  constexpr std::size_t kWave = 4;
  for (std::size_t wave = 0; wave < combos.size() && !w.expired(); wave += kWave) {
  const double kept = w.best();
  const std::size_t end = std::min(combos.size(), wave + kWave);
  auto search_combo = [&](std::size_t ci) {
        const std::vector<int>& order = combos[ci].order;
        const int mbs = combos[ci].mbs;
        const ScheduleKind kind = combos[ci].kind;
        if (w.expired()) return;
        std::set<std::vector<int>> evaluated;  // stage shapes already split and estimated
        HaptDp dp(w, order, mbs, kind);
        auto fresh = [&](const std::vector<StageShape>& shapes) {
          std::vector<int> key = {mbs, static_cast<int>(kind)};
          for (const auto& sh : shapes) key.insert(key.end(), {sh.sub, sh.dp, sh.tp});
          return evaluated.insert(key).second;
        };
        auto evaluate = [&](const std::vector<StageShape>& shapes) {
          if (shapes.empty() || !fresh(shapes)) return;
          Layout l;
          l.stages = shapes;
          l.micro_batch_size = mbs;
          l.schedule = kind;
          if (auto c = w.eval.best_split(l)) w.offer(*c);
        };
        // The smallest feasible t_max by bisection between 0 and "everything on one stage".
        double hi = 0;
        {
          Layout probe;
          probe.micro_batch_size = mbs;
          for (int j : order) {
            probe.stages = {{j, 1, 1, 1}};
            const StageTable& t = w.eval.table(probe, 0, 0, Recompute::none);
            hi = std::max(hi, t.time.back());
          }
        }
        // Bracketed from below by doubling: a DP costs more the larger t_max is.
        double lo = 0;
        {
          const double top = hi * 1.000001;
          double up = top;
          for (double t = hi / 1024; t < top; t *= 2) {
            if (!dp.solve(t).empty()) {
              up = t;
              break;
            }
            lo = t;
            if (w.expired()) return;
          }
          if (up == top && dp.solve(top).empty()) return;
          hi = up;
        }
        for (int it = 0; it < 30 && hi - lo > 1e-3 * hi; ++it) {  // the ladder steps by 8%
          const double mid = (lo + hi) / 2;
          if (dp.solve(mid).empty()) lo = mid;
          else hi = mid;
          if (w.expired()) return;
        }
        // Upward from the smallest feasible t_max t_S while (B-1)·t_max can beat the best plan
        // found, i.e. up to t_E = T(t_S)/B (bidirectional pruning), in parallel batches.
        const int m = w.eval.model().training.global_batch_size / mbs;
        double best_T = std::numeric_limits<double>::infinity();
        double tau = hi;
        // What a rung must beat: this combination's best, and the k-th best kept before the wave.
        auto target = [&] { return std::min(best_T, kept); };
        for (int batch = 0; batch < 8 && (m - 1) * tau < target() && !w.expired(); ++batch) {
          std::vector<double> taus;
          for (int i = 0; i < 6; ++i, tau *= 1.08) taus.push_back(tau);
          std::vector<std::vector<StageShape>> found(taus.size());
          const double bar = target();
          tbb::parallel_for(std::size_t(0), taus.size(), [&](std::size_t i) {
            if (w.expired() || (m - 1) * taus[i] >= bar) return;
            HaptDp local(w, order, mbs, kind);
            found[i] = local.solve(taus[i]);
          });
          for (const auto& shapes : found) {
            if (shapes.empty() || !fresh(shapes)) continue;
            Layout l;
            l.stages = shapes;
            l.micro_batch_size = mbs;
            l.schedule = kind;
            for (const Candidate& c : w.eval.evaluate(l, {kind}, nullptr, kept)) {
              best_T = std::min(best_T, c.estimate_s);
              w.offer(c);
            }
          }
        }
        // The last resort of few micro-batches: t_max = t_E itself.
        if (m > 1 && best_T < std::numeric_limits<double>::infinity()) {
          HaptDp local(w, order, mbs, kind);
          evaluate(local.solve(best_T / (m - 1)));
        }
        w.note_progress("hapt order " + std::to_string(order.front()) + ", micro-batch " + std::to_string(mbs));
  };
  // The combinations start in their order, each on the next thread free (split as a range,
  // the wave's second started after its third and fourth: on 10,000 devices hapt's best plan,
  // from the second of micro-batch 16, came 1.2 s after the wave began, and it takes 0.35 s).
  // What each finds does not depend on it.
  std::atomic<std::size_t> next{wave};
  tbb::parallel_for(wave, end, [&](std::size_t) {
    for (std::size_t ci = next++; ci < end; ci = next++) search_combo(ci);
  });
  }
}

}  // namespace het::search
