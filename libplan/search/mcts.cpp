// Principle-guided Monte Carlo tree search (HetAuto §4.1, Algorithm 1, App. B.3).
//
// Decision tree (Fig. 3), mapped to our Layout (k identical pipelines of stage shapes):
//   root           k, the number of identical pipelines (data-parallel replicas). One root
//                  subtree per k, searched in parallel (§7.1 "Multiprocessing": the root's
//                  children are independent subproblems — there one per stage count p).
//   level 1 (q)    the micro-batch: b sequences per data-parallel replica of a stage, from the
//                  model's micro_batch_sizes. HetAuto's q (micro-batches per iteration) and its
//                  local micro-batch b = B/(q·d) (App. B, Table 6) determine each other; here
//                  q = B / (k · b · lcm_i d_i) once the stages' d_i are chosen.
//   level 2 (σ)    the order of the subclusters used (an ordered subset). HetAuto permutes all
//                  C clusters and gives each at least one stage; leaving a subcluster out is
//                  our addition, so that the space holds the exhaustive oracle's.
//   per subcluster j in σ: the number of stages n_j and one (d, c, t) for all of them
//                  (factorisations()), using ⌊N_j / k⌋ devices per pipeline.
//   HetAuto's p, the number of pipeline stages, is Σ_j n_j: decided subcluster by subcluster,
//   as in Fig. 3 where each cluster's stage count is an action. The layer distribution is not
//   a tree level: the evaluator's best split (Evaluator::evaluate) is exact for the shapes,
//   so a rollout ends with it rather than with a random split.
//
// Iteration (Algorithm 1): select by UCB (eq. 1) while a node has no untried action, expand a
// random untried action, roll out at random to a complete layout, back-propagate the reward
// 1/(1+ℓ). ℓ is the layout's best estimate over the schedules divided by the instance's work
// lower bound (peak_work_bound: ℓ ≥ 1 for any plan, ~1 for an ideal one), so rewards are
// comparable across instances. Reward 0 on out-of-memory, decided when a subcluster's choice
// is made: one layer on one of its stages with the leanest recomputation and one micro-batch
// in flight does not fit, or, after the last subcluster, the stages cannot hold all layers.
// Subtrees that are fully explored are not selected again, so small spaces end exactly.
//
// Determinism and monotonicity: each subtree has its own seeded std::mt19937_64, memo,
// top-k and incumbents; nothing it does depends on another subtree or on time, except that
// the deadline (or --mcts-iterations) stops its sequence of iterations. A larger budget
// therefore extends every subtree's sequence. The candidates that ever enter a subtree's top k
// by estimate are simulated as they enter; the algorithm hands over the best k of those by
// simulated time, so its result (the best simulated) can only improve with a longer sequence.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include <tbb/parallel_for.h>

#include "plan/validate.hpp"
#include "search/algorithms.hpp"

namespace het::search {

namespace {

// One decision. Level 1: value = b. Level 2: value = index of an ordered subset. A
// subcluster's level: value = its stage count, shape = their (d, c, t).
struct Action {
  int value = 0;
  Shape3 shape{1, 1, 1};
};

// A prefix of decisions: the state of a tree node.
struct Prefix {
  int b = 0;                        // 0: not chosen yet
  int order = -1;                   // index into Subtree::orders; -1: not chosen yet
  std::vector<Action> subclusters;  // choices for orders[order][0..], in order
  double layer_room = 0;            // Σ over the chosen stages of the layers each can hold
};

struct Node {
  std::vector<Action> actions;                  // feasible extensions of the prefix
  std::vector<std::unique_ptr<Node>> children;  // by action; null while untried
  std::vector<int> untried;
  bool generated = false;                       // actions listed
  bool terminal = false;                        // a complete layout or out of memory
  bool exhausted = false;                       // nothing below is left to explore
  double terminal_reward = 0;
  double q = 0;  // Q(s, a): total reward through this node
  int n = 0;     // N(s, a)
};

// A simulated incumbent: a candidate that entered the subtree's top k by estimate.
struct Simulated {
  Candidate candidate;
  double iteration_s = 0;
};

// One root subtree (a fixed number of pipelines k) with everything it owns.
struct Subtree {
  int k = 1;
  std::mt19937_64 rng;
  std::vector<std::vector<int>> orders;  // ordered subsets of the subclusters with ⌊N_j/k⌋ ≥ 1
  Node root;
  std::map<std::vector<int>, double> memo;          // layout → reward
  std::map<std::vector<int>, int> room;             // (sub, b, d, c, t) → layers a stage holds
  std::vector<Candidate> top;                       // best by estimate, at most top_k
  std::vector<Simulated> incumbents;                // best by simulated time, at most top_k
  std::int64_t iterations = 0;
  std::int64_t evaluations = 0;  // layouts evaluated (memo misses)
  std::int64_t improved_at = 0;  // evaluations when the subtree's best simulated last improved
};

// Everything an iteration reads but does not change.
struct Context {
  Work& w;
  int layers;          // units between the embedding and the head (P1: at least one per stage)
  double scale;        // work lower bound: ℓ = estimate / scale
  double lambda;
  std::size_t top_k;
};

double reward_of(const Context& cx, double estimate_s) { return 1 / (1 + estimate_s / cx.scale); }

// The ordered subsets of n subclusters number sum over r of n!/(n-r)!: 109,601 for 8, 9.9
// million for 10 (which exhausted memory before the first iteration). A subtree lists at most
// kMaxOrders: those of the longest lengths whose count stays within it, so every order up to 8
// subclusters (HetAuto's space), pipelines over at most 2 of them with 64 subclusters.
constexpr std::int64_t kMaxOrders = 1 << 17;

std::size_t longest_order(std::size_t n) {
  std::int64_t total = 0, of_length = 1;
  std::size_t longest = 1;
  for (std::size_t r = 1; r <= n; ++r) {
    of_length *= static_cast<std::int64_t>(n - r + 1);  // n!/(n-r)!, at most kMaxOrders * n here
    if (total + of_length > kMaxOrders) break;
    total += of_length, longest = r;
  }
  return longest;
}

void each_ordered_subset(const std::vector<int>& usable, std::size_t longest, std::vector<int>& cur,
                         std::vector<bool>& used, std::vector<std::vector<int>>& out) {
  if (!cur.empty()) out.push_back(cur);
  if (cur.size() == longest) return;
  for (std::size_t i = 0; i < usable.size(); ++i) {
    if (used[i]) continue;
    used[i] = true, cur.push_back(usable[i]);
    each_ordered_subset(usable, longest, cur, used, out);
    used[i] = false, cur.pop_back();
  }
}

int per_pipeline_devices(const Context& cx, const Subtree& t, int sub) {
  return cx.w.eval.cluster().subclusters[sub].num_devices() / t.k;
}

// Layers one stage of `shape` on `sub` can hold with the leanest recomputation, one
// micro-batch in flight and b sequences per replica: a necessary condition for any split.
int layer_room(const Context& cx, Subtree& t, int sub, int b, const Shape3& shape) {
  const std::vector<int> key = {sub, b, shape.dp, shape.cp, shape.tp};
  if (auto it = t.room.find(key); it != t.room.end()) return it->second;
  Layout one;
  one.pipelines = t.k;
  one.stages = {{sub, shape.dp, shape.cp, shape.tp}};
  one.micro_batch_size = b * shape.dp;
  const StageTable& tb = cx.w.eval.table(one, 0, 0, cx.w.eval.recompute_options().back());
  int x = 0;
  while (x < cx.layers && tb.memory(1, x + 1, 1, false) <= tb.capacity) ++x;
  t.room.emplace(key, x);
  return x;
}

bool complete(const Subtree& t, const Prefix& s) {
  return s.order >= 0 && s.subclusters.size() == t.orders[s.order].size();
}

// The feasible extensions of a prefix ("constraint-aware action space pruning", §4.1).
std::vector<Action> actions(const Context& cx, const Subtree& t, const Prefix& s) {
  std::vector<Action> out;
  const ModelSpec& m = cx.w.eval.model();
  if (s.b == 0) {
    for (int b : cx.w.micro_batch_sizes)
      if (m.training.global_batch_size % (t.k * b) == 0) out.push_back({b, {1, 1, 1}});
    return out;
  }
  if (s.order < 0) {
    for (std::size_t i = 0; i < t.orders.size(); ++i) out.push_back({int(i), {1, 1, 1}});
    return out;
  }
  const std::vector<int>& order = t.orders[s.order];
  const std::size_t pos = s.subclusters.size();
  int stages = 0;
  for (const Action& a : s.subclusters) stages += a.value;
  // P1: every stage holds at least one layer; the subclusters after this one need a stage each.
  const int most = cx.layers - stages - static_cast<int>(order.size() - pos - 1);
  const int sub = order[pos];
  const int devices = per_pipeline_devices(cx, t, sub);
  for (int n = 1; n <= std::min(devices, most); ++n) {
    if (devices % n) continue;
    // P2: a stage's devices are of one subcluster; P3: its n stages are consecutive;
    // P4: one (d, c, t) for all of them.
    for (const Shape3& f : factorisations(cx.w.eval, sub, devices / n)) out.push_back({n, f});
  }
  return out;
}

// Applies an action; false when the subcluster's choice runs out of memory (reward 0).
bool apply(const Context& cx, Subtree& t, Prefix& s, const Action& a) {
  if (s.b == 0) {
    s.b = a.value;
    return true;
  }
  if (s.order < 0) {
    s.order = a.value;
    return true;
  }
  const int sub = t.orders[s.order][s.subclusters.size()];
  s.subclusters.push_back(a);
  // Out-of-memory as soon as this subcluster's choices are made (§4.1, "Custom Reward").
  const int room = layer_room(cx, t, sub, s.b, a.shape);
  if (room < 1) return false;  // P1: each of its stages must hold a whole layer
  s.layer_room += double(room) * a.value;
  if (complete(t, s) && s.layer_room < cx.layers) return false;
  return true;
}

Layout layout_of(const Subtree& t, const Prefix& s) {
  Layout l;
  l.pipelines = t.k;
  int lcm = 1;
  const std::vector<int>& order = t.orders[s.order];
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Action& a = s.subclusters[i];
    lcm = std::lcm(lcm, a.shape.dp);
    for (int j = 0; j < a.value; ++j) l.stages.push_back({order[i], a.shape.dp, a.shape.cp, a.shape.tp});
  }
  l.micro_batch_size = s.b * lcm;
  return l;
}

// Keeps `c` if it enters the subtree's top k by estimate; an entrant is simulated, and kept
// among the incumbents if it is valid, fits memory and is among the k best simulated.
void keep(const Context& cx, Subtree& t, const Candidate& c) {
  auto by_estimate = [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; };
  if (t.top.size() >= cx.top_k && !(c.estimate_s < t.top.back().estimate_s)) return;
  t.top.insert(std::upper_bound(t.top.begin(), t.top.end(), c, by_estimate), c);
  if (t.top.size() > cx.top_k) t.top.pop_back();
  const Plan plan = cx.w.eval.to_plan(c);
  if (!validate_plan(plan, "search").empty()) return;
  auto outcome = predict::predict(plan, cx.w.eval.compute(), cx.w.eval.ranking_options());
  if (!outcome || !outcome->fits_memory()) return;
  Simulated sim{c, outcome->plan.predicted->iteration_s};
  auto by_time = [](const Simulated& a, const Simulated& b) { return a.iteration_s < b.iteration_s; };
  const auto at = std::upper_bound(t.incumbents.begin(), t.incumbents.end(), sim, by_time);
  if (at == t.incumbents.begin()) t.improved_at = t.evaluations, cx.w.note(c.estimate_s);
  t.incumbents.insert(at, std::move(sim));
  if (t.incumbents.size() > cx.top_k) t.incumbents.pop_back();
}

// The reward of a complete layout, memoised (§7.1 "Memoization"). A layout whose lower bound
// cannot enter the subtree's top k is not solved: its reward is that of its bound, an upper
// bound of its true reward. One that can is solved only as far as it can still enter: when no
// split of it does, its reward is that of the cutoff, an upper bound of its true reward too.
double evaluate(const Context& cx, Subtree& t, const Prefix& s) {
  const Layout l = layout_of(t, s);
  std::vector<int> key = {l.micro_batch_size};
  for (const StageShape& st : l.stages) key.insert(key.end(), {st.sub, st.dp, st.cp, st.tp});
  if (auto it = t.memo.find(key); it != t.memo.end()) return it->second;
  double reward = 0;
  ++t.evaluations;
  if (cx.w.eval.admissible(l)) {
    const double cutoff = t.top.size() >= cx.top_k ? t.top.back().estimate_s : Evaluator::kNoCutoff;
    const auto bound = cx.w.eval.bound(l);
    if (bound && *bound >= cutoff) {
      reward = reward_of(cx, *bound);
    } else if (bound) {
      cx.w.count(static_cast<std::int64_t>(cx.w.schedules.size()));
      bool cut = false;
      for (const Candidate& c : cx.w.eval.evaluate(l, cx.w.schedules, nullptr, cutoff, &cut)) {
        reward = std::max(reward, reward_of(cx, c.estimate_s));
        keep(cx, t, c);
      }
      if (reward == 0 && cut) reward = reward_of(cx, cutoff);
    }
  }
  t.memo.emplace(std::move(key), reward);
  return reward;
}

// Simulation: random actions from `s` to a complete layout (Algorithm 1, line 8).
double rollout(const Context& cx, Subtree& t, Prefix s) {
  while (!complete(t, s)) {
    const std::vector<Action> as = actions(cx, t, s);
    if (as.empty()) return 0;
    const Action& a = as[std::uniform_int_distribution<std::size_t>(0, as.size() - 1)(t.rng)];
    if (!apply(cx, t, s, a)) return 0;
  }
  return evaluate(cx, t, s);
}

// UCB(s, a) = Q(s, a)/N(s, a) + λ·sqrt(ln N(s) / N(s, a))  (HetAuto eq. 1); the first best wins ties.
int select_child(const Context& cx, const Node& node) {
  int best = -1;
  double best_score = -1;
  for (std::size_t i = 0; i < node.children.size(); ++i) {
    const Node* c = node.children[i].get();
    if (!c || c->exhausted || c->n == 0) continue;
    const double score = c->q / c->n + cx.lambda * std::sqrt(std::log(double(node.n)) / c->n);
    if (best < 0 || score > best_score) best = int(i), best_score = score;
  }
  return best;
}

void generate(const Context& cx, const Subtree& t, const Prefix& s, Node& node) {
  node.generated = true;
  node.actions = actions(cx, t, s);
  node.children.resize(node.actions.size());
  node.untried.resize(node.actions.size());
  std::iota(node.untried.begin(), node.untried.end(), 0);
  if (node.actions.empty()) node.terminal = true;  // a dead end: reward 0
}

// One MCTS iteration: selection, expansion, simulation, back-propagation.
void iterate(const Context& cx, Subtree& t) {
  std::vector<Node*> path = {&t.root};
  Prefix s;
  Node* node = &t.root;
  double reward = 0;
  while (true) {
    if (node->terminal) {
      reward = node->terminal_reward;
      break;
    }
    if (!node->generated) generate(cx, t, s, *node);
    if (node->terminal) break;
    if (!node->untried.empty()) {
      // Expansion: a random untried action.
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, node->untried.size() - 1)(t.rng);
      const int a = node->untried[pick];
      node->untried.erase(node->untried.begin() + static_cast<long>(pick));
      node->children[a] = std::make_unique<Node>();
      Node* child = node->children[a].get();
      path.push_back(child);
      if (!apply(cx, t, s, node->actions[a])) {
        child->terminal = true;  // out of memory: reward 0
      } else if (complete(t, s)) {
        child->terminal = true;
        child->terminal_reward = evaluate(cx, t, s);
      }
      reward = child->terminal ? child->terminal_reward : rollout(cx, t, s);
      break;
    }
    const int a = select_child(cx, *node);
    if (a < 0) break;  // every child exhausted: marked below
    apply(cx, t, s, node->actions[a]);
    node = node->children[a].get();
    path.push_back(node);
  }
  for (Node* p : path) p->q += reward, ++p->n;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    Node& p = **it;
    p.exhausted = p.terminal ||
                  (p.generated && p.untried.empty() &&
                   std::all_of(p.children.begin(), p.children.end(), [](const auto& c) { return c->exhausted; }));
    if (!p.exhausted) break;
  }
  ++t.iterations;
}

std::vector<Subtree> make_subtrees(const Context& cx) {
  const ClusterSpec& c = cx.w.eval.cluster();
  const int B = cx.w.eval.model().training.global_batch_size;
  int most = 0;
  for (const auto& s : c.subclusters) most = std::max(most, s.num_devices());
  std::vector<Subtree> out;
  for (int k = 1; k <= most; ++k) {
    if (B % k) continue;
    Subtree t;
    t.k = k;
    std::seed_seq seq{std::uint64_t(cx.w.opt.seed), std::uint64_t(k)};
    t.rng.seed(seq);
    std::vector<int> usable;
    for (std::size_t j = 0; j < c.subclusters.size(); ++j)
      if (c.subclusters[j].num_devices() >= k) usable.push_back(int(j));
    std::vector<int> cur;
    std::vector<bool> used(usable.size(), false);
    each_ordered_subset(usable, longest_order(usable.size()), cur, used, t.orders);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

void run_mcts(Work& w) {
  const Context cx{w, w.eval.num_units() - 2, peak_work_bound(w.eval, w.micro_batch_sizes), w.opt.mcts_lambda,
                   static_cast<std::size_t>(std::max(1, w.opt.top_k))};
  std::vector<Subtree> trees = make_subtrees(cx);
  const std::int64_t cap = w.opt.mcts_iterations, patience = w.opt.mcts_patience;
  // Converged: as many layouts evaluated without a better best as it took to find it, and at
  // least `patience` (ours; HetAuto runs to its time budget). Iterations that only revisit
  // memoised layouts do not count: small trees are still explored to the end.
  auto converged = [&](const Subtree& t) {
    return patience > 0 && t.evaluations - t.improved_at >= std::max(patience, t.improved_at);
  };
  auto done = [&](const Subtree& t) { return t.root.exhausted || (cap > 0 && t.iterations >= cap) || converged(t); };
  // Rounds of a few iterations per subtree keep every subtree moving on few cores; a
  // subtree's own sequence does not depend on how the rounds are scheduled.
  constexpr int kChunk = 8;
  while (!w.expired()) {
    std::vector<Subtree*> active;
    for (auto& t : trees)
      if (!done(t)) active.push_back(&t);
    if (active.empty()) break;
    tbb::parallel_for(std::size_t(0), active.size(), [&](std::size_t i) {
      for (int c = 0; c < kChunk && !done(*active[i]) && !w.expired(); ++c) iterate(cx, *active[i]);
    });
    std::int64_t total = 0;
    for (const auto& t : trees) total += t.iterations;
    w.note_progress(std::to_string(total) + " iterations");
  }
  // The k best simulated over all subtrees, in a fixed order.
  std::vector<Simulated> all;
  for (const auto& t : trees) all.insert(all.end(), t.incumbents.begin(), t.incumbents.end());
  std::stable_sort(all.begin(), all.end(), [](const Simulated& a, const Simulated& b) { return a.iteration_s < b.iteration_s; });
  if (all.size() > cx.top_k) all.resize(cx.top_k);
  for (const auto& s : all) w.offer(s.candidate);
}

}  // namespace het::search
