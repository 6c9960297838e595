// Lower bounds on a plan's iteration time (algorithms.hpp states what each assumes).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <tbb/parallel_for.h>

#include "predict/stage_cost.hpp"
#include "search/algorithms.hpp"

namespace het::search {

double peak_work_bound(const Evaluator& eval, const std::vector<int>& mbs_list) {
  const ModelSpec& m = eval.model();
  const ClusterSpec& c = eval.cluster();
  double rate = 0;
  for (std::size_t j = 0; j < c.subclusters.size(); ++j) {
    double best = 1e300;
    for (int mbs : mbs_list) {
      Layout l;
      l.micro_batch_size = mbs;
      l.stages = {{int(j), 1, 1, 1}};
      const StageTable& t = eval.table(l, 0, 0, Recompute::none);
      best = std::min(best, t.sum(t.time, 1, 1) / mbs);
    }
    rate += c.subclusters[j].num_devices() / best;
  }
  const double layers = eval.num_units() - 2;  // sublayer units count as themselves
  return layers * m.training.global_batch_size / rate;
}

double work_lower_bound(const Evaluator& eval, const std::vector<int>& mbs_list) {
  const ModelSpec& m = eval.model();
  const ClusterSpec& c = eval.cluster();
  const int per_layer = eval.granularity() == Granularity::sublayer ? 2 : 1;  // units of one layer
  const int U = eval.num_units();
  // Per subcluster, the least device-time one sequence costs a layer (forward and backward)
  // over every stage shape (tp, cp) a layer can be computed in there: the micro-batch, the
  // recomputation and the shape chosen so that one layer with one micro-batch in flight fits a
  // device (its model state sharded as widely as ZeRO could: every device of the subcluster a
  // replica), the shape's collectives included. Every plan computes every layer of every
  // sequence on some such shape, so its devices spend at least that much time on each; the
  // embedding and the head cost at least their least ratio to a layer on any subcluster.
  double rate = 0, extra = 1e300;  // layers per second of all devices; head + embedding in layers
  for (std::size_t j = 0; j < c.subclusters.size(); ++j) {
    const int n = c.subclusters[j].num_devices();
    double best = 1e300, ends = 1e300;
    for (int g = 1; g <= n; g *= 2)
      for (const Shape3& f : factorisations(eval, int(j), g)) {
        if (f.dp != 1) continue;
        for (int mbs : mbs_list) {
          Layout l;
          l.pipelines = n / g;  // as many replicas as the subcluster holds: the leanest model state
          l.micro_batch_size = mbs;
          l.stages = {{int(j), 1, f.cp, f.tp}};
          for (Recompute r : eval.recompute_options()) {  // cheapest first: the first that fits is the fastest
            const StageTable& t = eval.table(l, 0, 0, r);
            if (t.memory(1, per_layer, f.tp, 1, false) > t.capacity) continue;
            const double layer = t.sum(t.time, 1, per_layer);
            const double device_s = layer / mbs * f.tp * f.cp;
            if (device_s < best) best = device_s, ends = (t.sum(t.time, 0, 0) + t.sum(t.time, U - 1, U - 1)) / layer;
            break;
          }
        }
      }
    if (best < 1e300) rate += n / best, extra = std::min(extra, ends);
  }
  if (rate <= 0) return 0;
  const double layers = double(U - 2) / per_layer;
  return (layers + extra) * m.training.global_batch_size / rate;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One way to compute a run of units as a stage of every pipeline: on `devices` devices of
// subcluster `sub` (per pipeline), c per micro-batch (forward + backward, recomputation and the
// stage's own collectives included), and `tail` after its last backward (the gradient sync the
// last backward does not hide, then the optimizer step).
struct Way {
  int sub, devices;
  double c, tail;
  int hold;  // the micro-batches in flight its memory holds (at most m)
};

// The ways of every run of units for P pipelines of micro-batch b: per (first, last) unit, the
// Pareto front over (devices, c, tail, hold) of every shape (factorisations(): the search's
// (dp, cp, tp), dp dividing b) whose P copies fit the subcluster, under every recomputation
// that holds the run with one micro-batch in flight (ZeRO over its replicas, as the tables).
// rest[u]: the least Σ c of any cut of units u.. into stages (rest[U] = 0), which the round
// trip of a micro-batch from a stage ending at u − 1 takes at least.
struct Ways {
  int U = 0;
  std::vector<std::vector<Way>> of;  // [a * U + e]
  std::vector<double> rest;          // [U + 1]
  const std::vector<Way>& at(int a, int e) const { return of[std::size_t(a) * U + e]; }
};

bool dominates(const Way& x, const Way& y) {  // x is no worse than y on the same subcluster
  return x.sub == y.sub && x.devices <= y.devices && x.c <= y.c && x.tail <= y.tail && x.hold >= y.hold;
}

Ways ways_of(const Evaluator& eval, int P, int b, int m, double cap) {
  const ModelSpec& model = eval.model();
  const ClusterSpec& cluster = eval.cluster();
  const int U = eval.num_units();
  Ways w;
  w.U = U;
  w.of.resize(std::size_t(U) * U);
  const bool overlap = eval.predict_options().overlap_sync;
  const double wte = model.architecture == Architecture::gpt ? double(model.vocab_size) * model.hidden_size : 0;
  for (std::size_t j = 0; j < cluster.subclusters.size(); ++j) {
    const SubclusterSpec& sub = cluster.subclusters[j];
    for (int g = 1; g * P <= sub.num_devices(); ++g)
      for (const Shape3& f : factorisations(eval, int(j), g)) {
        if (b % f.dp) continue;
        Layout l;
        l.pipelines = P;
        l.micro_batch_size = b;
        l.stages = {{int(j), f.dp, f.cp, f.tp}};
        const int replicas = P * f.dp * f.cp;
        // The sync's links at their fastest over where the block starts within a node: each
        // link's most bandwidth and least latency (a ring collective's time falls with both).
        // Found at the first way fast enough to need them.
        LinkSpec split{0, kInf}, all{0, kInf};
        auto links = [&] {
          if (split.bandwidth > 0) return;
          for (int o = 0; o < sub.devices_per_node; ++o) {
            const auto [x, y] = eval.sync_links(l.stages[0], P, o);
            split = {std::max(split.bandwidth, x.bandwidth), std::min(split.latency, x.latency)};
            all = {std::max(all.bandwidth, y.bandwidth), std::min(all.latency, y.latency)};
          }
        };
        // Each recomputation's table, made when a run needs it (most runs fit without).
        const std::vector<Recompute>& options = eval.recompute_options();
        std::vector<const StageTable*> tables(options.size(), nullptr);
        auto table = [&](std::size_t r) -> const StageTable& {
          if (!tables[r]) tables[r] = &eval.table(l, 0, 0, options[r]);
          return *tables[r];
        };
        for (int a = 0; a < U; ++a)
          for (int e = a; e < U; ++e) {
            // The options are ordered by cost (the evaluator's): the first that fits is the
            // fastest, the later ones may hold more micro-batches in flight.
            std::size_t r = 0;
            while (r < options.size() && table(r).memory(a, e, f.tp, 1, e == U - 1) > table(r).capacity) ++r;
            if (r == options.size()) break;  // nor does any longer run
            if (m * table(r).sum(table(r).time, a, e) > cap) break;  // a stage this slow cannot beat `cap`, nor can a longer one
            std::vector<Way>& front = w.of[std::size_t(a) * U + e];
            for (; r < options.size(); ++r) {
              const StageTable& t = table(r);
              const bool head = e == U - 1;
              if (t.memory(a, e, f.tp, 1, head) > t.capacity) continue;
              const double c = t.sum(t.time, a, e);
              if (m * c > cap) continue;
              // gpt's tied embedding is synced on a ring of its own (left out: a lower bound).
              const double params = t.sum(t.params, a, e) - (a == 0 ? wte : 0), whole = t.sum(t.whole, a, e) - (a == 0 ? wte : 0);
              links();
              const double sync = predict::stage_sync_s(model, params, whole, f.tp, replicas, split, all, 0, 0, split);
              const double opt = predict::optimizer_s(eval.compute(), model, *t.device, f.tp, params, whole,
                                                      model.training.zero_stage >= 1 ? replicas : 1);
              const double tail = std::max(0.0, sync - (overlap ? t.sum(t.backward, a, e) : 0)) + opt;
              if (m * c + tail > cap) continue;
              // Memory is linear in the micro-batches in flight; every schedule's warm-up count
              // is what the stage holds at most (schedule.hpp) and fits memory (predict).
              const double one = t.memory(a, e, f.tp, 1, head), per = t.sum(t.act, a, e);
              int hold = per > 0 ? int(std::min<double>(m, std::floor((t.capacity - one) / per) + 1)) : m;
              while (hold < m && t.memory(a, e, f.tp, hold + 1, head) <= t.capacity) ++hold;  // never below the exact count
              const Way way{int(j), g, c, tail, std::max(1, hold)};
              if (std::any_of(front.begin(), front.end(), [&](const Way& x) { return dominates(x, way); })) continue;
              front.erase(std::remove_if(front.begin(), front.end(), [&](const Way& x) { return dominates(way, x); }), front.end());
              front.push_back(way);
            }
          }
      }
  }
  w.rest.assign(std::size_t(U) + 1, kInf);
  w.rest[U] = 0;
  for (int a = U - 1; a >= 0; --a)
    for (int e = a; e < U; ++e)
      for (const Way& x : w.at(a, e)) w.rest[a] = std::min(w.rest[a], x.c + w.rest[e + 1]);
  return w;
}

// Whether P identical pipelines of m micro-batches could run in T, relaxed: some cut of the
// units into stages, each done some way, with every stage's
//   T >= pi + m·c    (its first micro-batch arrives after the forwards of the stages before it,
//                     and its last gradient leaves back through their backwards: pi, their c's)
//   T >= m·c + tail  (its sync and optimizer step follow its last backward)
//   T >= m·(c + rest)/hold  (each micro-batch holds one of its `hold` places in memory from
//                     its forward to its backward there, through every later stage's forward
//                     and backward: c + rest at least; m of them in T)
// whose devices, priced `price` per device of each subcluster, cost at most what the cluster
// has (Lagrangian relaxation: any prices >= 0 give a necessary condition). pi is kept rounded
// down to a multiple of `width` (a relaxation too). `used` gets the cheapest cut's devices per
// subcluster, all pipelines together.
bool feasible(const Ways& w, int P, int m, double T, double width, const std::vector<double>& price,
              const std::vector<int>& have, std::vector<double>& used) {
  const int U = w.U;
  const int K = int(T / width) + 1;
  struct Cell {
    double cost = kInf;
    int from = -1, way_a = -1, way_e = -1, way_i = -1;
  };
  std::vector<Cell> cell(std::size_t(U + 1) * K);
  auto at = [K](int u, int k) { return std::size_t(u) * K + k; };
  cell[at(0, 0)].cost = 0;
  for (int u = 0; u < U; ++u)
    for (int k = 0; k < K; ++k) {
      const Cell& here = cell[at(u, k)];
      if (here.cost == kInf) continue;
      const double pi = k * width, room = (T - pi) / m;
      for (int e = u; e < U; ++e) {
        const std::vector<Way>& front = w.at(u, e);
        if (front.empty()) break;  // no longer run fits memory either
        bool any = false;
        for (std::size_t i = 0; i < front.size(); ++i) {
          const Way& way = front[i];
          if (way.c > room) continue;
          any = true;
          if (m * way.c + way.tail > T) continue;
          if (way.hold < m && m * (way.c + w.rest[e + 1]) > T * way.hold) continue;
          const double next = pi + way.c;
          if (e + 1 < U && next >= T) continue;  // no later stage could start in time
          const int nk = std::min(K - 1, int(next / width));
          const double cost = here.cost + price[way.sub] * way.devices * P;
          Cell& to = cell[at(e + 1, nk)];
          if (cost < to.cost) to = {cost, int(at(u, k)), u, e, int(i)};
        }
        if (!any) break;  // c grows with the run: every longer one is too slow
      }
    }
  double budget = 0;
  for (std::size_t j = 0; j < price.size(); ++j) budget += price[j] * have[j];
  std::size_t best = 0;
  double cost = kInf;
  for (int k = 0; k < K; ++k)
    if (cell[at(U, k)].cost < cost) cost = cell[at(U, k)].cost, best = at(U, k);
  used.assign(price.size(), 0);
  if (cost == kInf) return false;
  for (std::size_t s = best; cell[s].from >= 0; s = std::size_t(cell[s].from)) {
    const Way& way = w.at(cell[s].way_a, cell[s].way_e)[std::size_t(cell[s].way_i)];
    used[way.sub] += way.devices * P;
  }
  return cost <= budget * (1 + 1e-12);
}

}  // namespace

double pipeline_lower_bound(const Evaluator& eval, const std::vector<int>& mbs_list, double start, double upper) {
  const ClusterSpec& cluster = eval.cluster();
  const int G = eval.model().training.global_batch_size;
  const std::size_t J = cluster.subclusters.size();
  std::vector<int> have(J);
  int widest = 0;
  for (std::size_t j = 0; j < J; ++j) have[j] = cluster.subclusters[j].num_devices(), widest = std::max(widest, have[j]);
  if (start <= 0) return 0;
  // Every (pipelines, micro-batch) the search's layouts can take (Evaluator::admissible).
  struct Combo {
    int P, b;
    double bound = 0;
  };
  std::vector<Combo> combos;
  for (int b : mbs_list)
    for (int P = 1; P <= widest && P * b <= G; ++P) {
      if (G % (P * b)) continue;
      Layout l;
      l.pipelines = P, l.micro_batch_size = b;
      for (std::size_t j = 0; j < J; ++j)
        if (have[j] >= P) {
          l.stages = {{int(j), 1, 1, 1}};
          break;
        }
      if (eval.admissible(l)) combos.push_back({P, b});
    }
  constexpr int kBuckets = 128;  // pi's resolution: the start / kBuckets
  constexpr int kPriceSteps = 6;   // subgradient steps on the prices
  // The bound is the least over the combinations: fewest devices per pipeline-step first (they
  // bound lowest on the seed setups), and a combination infeasible at the least bound so far
  // (one DP) cannot lower it.
  std::sort(combos.begin(), combos.end(), [](const Combo& x, const Combo& y) {
    return std::make_pair(x.P * x.b, x.P) < std::make_pair(y.P * y.b, y.P);
  });
  std::atomic<double> least{upper > 0 ? upper : kInf};  // no plan is faster than the fastest: the bound is at most that
  // T on a geometric grid (steps of 0.01%), searched for the largest T found infeasible: the
  // same whatever bracket the search starts from, so that the bound does not depend on the
  // order the combinations ran in.
  constexpr double kStep = 1e-4;
  auto grid = [&](long k) { return start * std::exp(kStep * double(k)); };
  auto index_at = [&](double t) { return long(std::ceil(std::log(t / start) / kStep)); };
  auto bound_of = [&](std::size_t i) {
    Combo& co = combos[i];
    const int m = G / (co.P * co.b);
    const double cap = least.load();  // a way that cannot run below it is left out (ways_of)
    const Ways w = ways_of(eval, co.P, co.b, m, cap);
    // Prices: each subcluster's devices at their best rate of a layer (the work bound's, for
    // this combination), then moved towards where the cheapest cut over- or under-uses them.
    std::vector<double> price(J, 0);
    for (std::size_t j = 0; j < J; ++j) {
      double best = kInf;
      for (int u = 1; u + 1 < w.U; ++u)
        for (const Way& x : w.at(u, u))
          if (x.sub == int(j)) best = std::min(best, x.c * x.devices);
      price[j] = best < kInf ? 1 / best : 0;
    }
    const double width = start / kBuckets;
    std::vector<double> used;
    auto admits = [&](double t) { return feasible(w, co.P, m, t, width, price, have, used); };
    long found = index_at(1e-2 * start);  // infeasible under some prices: no plan of this combination is faster
    if (admits(grid(found))) return;      // (a bound of 0)
    long top = -1;  // the bracket's top under the first prices: a T they admit
    for (int step = 0; step <= kPriceSteps; ++step) {
      long lo = found, hi = -1;
      if (top > found + 1) {
        // New prices raise the bound only when they rule out a T above the one found, and
        // they move it little: galloping up from it tests a few T where a bisection over the
        // whole bracket tested ~17 (10,000 devices: the bound took 2 s of 10 s).
        long d = 1;
        while (found + d < top && !admits(grid(found + d))) lo = found + d, d *= 2;
        if (found + d < top) hi = found + d;  // admitted
        else lo = found;                      // none below the top: the whole bracket, as at first
      }
      if (hi < 0 && cap < kInf) {
        if (!admits(cap)) {  // as good as the least so far: it cannot lower the bound
          co.bound = cap;
          return;
        }
        hi = top = index_at(cap);  // admitted: by the ways that run below the cap, which ways_of kept
      } else if (hi < 0) {
        hi = std::max(index_at(start), found + 1);
        int grow = 0;
        while (grow <= 6 && !admits(grid(hi))) lo = hi, hi += long(std::log(2.0) / kStep), ++grow;
        if (grow > 6) {  // nothing fits below 64x the start: as good as impossible
          found = lo;
          break;
        }
        top = hi;
      }
      while (hi - lo > 1) {
        const long mid = lo + (hi - lo) / 2;
        (admits(grid(mid)) ? hi : lo) = mid;
      }
      found = std::max(found, lo);
      admits(grid(hi));
      bool moved = false;
      for (std::size_t j = 0; j < J; ++j) {
        if (price[j] <= 0) continue;
        const double ratio = (used[j] + 0.5) / (have[j] + 0.5);
        if (std::abs(ratio - 1) > 0.02) price[j] *= std::pow(ratio, 0.5), moved = true;
      }
      if (!moved) break;
    }
    co.bound = grid(found);
    for (double now = least.load(); co.bound < now && !least.compare_exchange_weak(now, co.bound);) {
    }
  };
  if (combos.empty()) return 0;
  bound_of(0);  // the first sets the least, which most of the others only need to be tested at
  tbb::parallel_for(std::size_t(1), combos.size(), bound_of);
  double bound = kInf;
  for (const Combo& co : combos) bound = std::min(bound, co.bound);
  return bound == kInf ? 0 : bound;
}

double lower_bound(const Evaluator& eval, const std::vector<int>& mbs_list, double upper) {
  const double work = work_lower_bound(eval, mbs_list);
  return std::max(work, pipeline_lower_bound(eval, mbs_list, work, upper));
}

}  // namespace het::search
