#pragma once
// The algorithms behind search::run (internal to the search module).
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "search/evaluator.hpp"
#include "search/search.hpp"

namespace het::search {

// The portfolio's best estimate so far and when it last improved by more than 0.1% (auto's
// convergence test, issue 20), on the members' clock: the time during which auto's slower
// members had the cores. They run behind the refinement (search.cpp), which takes the cores
// whenever it has work, so a second in which it ran is not a second in which they failed to
// improve. Thread-safe.
class Incumbent {
 public:
  // `own`: the estimate improves its member's own best by more than 0.1%. That counts as
  // progress too while it is within kMemberWindow of the portfolio's best: a member still
  // closing in on the best has not converged, and its plans seed the refinement's other
  // basins (on 10,000 devices hapt's fourth micro-batch size, at 5-7 s, leads to a plan 17%
  // better than the refinement had; the test had stopped the search before it came).
  static constexpr double kMemberWindow = 0.2;
  void offer(double estimate_s, bool own = false);
  // Advances the members' clock by `seconds` of wall time in which they had the cores.
  void tick(double seconds);
  // Whether the best has not improved for half the members' time it took to reach it (at
  // least `at_least_s`): the search has converged.
  bool stalled(double at_least_s) const;
  double clock_s() const;  // the members' clock
  // Whether no member has improved its own best to within `window` of the portfolio's best
  // (as the best is now) for the last `seconds` of the members' clock.
  bool members_quiet(double window, double seconds) const;

 private:
  mutable std::mutex mutex_;
  double best_ = 1e300;
  double clock_s_ = 0, improved_s_ = 0;  // the members' clock now, and at the last improvement
  std::vector<std::pair<double, double>> own_;  // each `own` offer: (members' clock, estimate)
};

// What an algorithm works with: the evaluator, the options resolved to concrete lists, a
// deadline, and a place to put its best candidates.
class Work {
 public:
  Work(const Evaluator& eval, const Options& opt, std::chrono::steady_clock::time_point deadline, std::string name);

  const Evaluator& eval;
  const Options& opt;
  std::vector<int> micro_batch_sizes;
  std::vector<ScheduleKind> schedules;
  const std::string name;

  bool expired() const;
  // Evaluates the layout for every micro-batch size and schedule (the layout's own are
  // ignored) unless its lower bound cannot beat the current best; keeps the top_k. The
  // model's micro_batch_sizes are sequences per data-parallel replica: the pipeline's
  // micro-batch is that times the lcm of its stages' dp.
  void consider(Layout layout);
  // The same for a fixed unit split (first unit of each stage; empty: the best split); not
  // pruned unless `prune` (a baseline wants its own plan evaluated). Pruning by the k-th best
  // kept leaves the final k best the same whatever the order of the calls (threads).
  void consider_split(Layout layout, const std::vector<int>& first_unit, bool prune);
  void offer(const Candidate& c);
  double best() const;
  std::vector<Candidate> take();
  std::vector<Candidate> peek() const;  // the k best so far, kept
  // Every candidate that was among the kSeedsPerMember best kept when it was offered, in the
  // order offered, from the `from`-th on: what auto feeds its refinement (search.cpp gather),
  // whenever the feed is polled.
  std::vector<Candidate> entered(std::size_t from) const;
  // Complete plans that a layout cannot express (pipelines of different shapes); run()
  // predicts them like the candidates.
  void offer_plan(Plan plan);
  std::vector<Plan> take_plans();
  std::chrono::steady_clock::time_point deadline() const { return deadline_.load(); }
  // Any time, from any thread (auto stops its members when the search has converged); a
  // later deadline also forgets an earlier expiry.
  void set_deadline(std::chrono::steady_clock::time_point d);
  // auto: where the candidates this work offers (and those it only notes) are reported.
  Incumbent* incumbent = nullptr;
  // A candidate the algorithm keeps to itself for now (mcts offers its best at the end).
  void note(double estimate_s) const;
  bool found() const { return own_best_.load() < 1e300; }  // whether it has noted a candidate
  std::int64_t layouts() const { return layouts_.load(); }
  void count(std::int64_t n = 1) { layouts_ += n; }
  bool timed_out() const { return timed_out_.load(); }
  void note_progress(const std::string& what) const;
  // Why the algorithm did not try (the instance is outside what it handles); its report's note.
  std::string skipped;

 private:
  std::atomic<std::chrono::steady_clock::time_point> deadline_;
  mutable std::mutex mutex_;
  std::vector<Candidate> top_;
  std::vector<Candidate> entered_;
  std::vector<Plan> plans_;
  std::atomic<std::int64_t> layouts_{0};
  mutable std::atomic<bool> timed_out_{false};
  mutable std::atomic<double> own_best_{1e300};  // the best estimate noted
  mutable std::chrono::steady_clock::time_point last_progress_{};
};

void run_uniform(Work& w);
void run_exhaustive(Work& w);
void run_hapt(Work& w);
void run_heteroauto(Work& w);
void run_mcts(Work& w);
// HexiScale §4: METIS parts of the cluster as differently-shaped pipelines (hexiscale.cpp).
void run_hexiscale(Work& w);
// The local refinement's state (refine.cpp), kept across calls: the layouts reached (pipelines
// and stage shapes), those reached but not yet expanded, and the best estimate reached, so
// that a later call goes on from where an earlier one stopped instead of expanding the same
// layouts again.
struct Refinement {
  // A layout's key in `seen`: its pipelines and each stage's shape (not its micro-batch or schedule).
  static std::vector<int> key(const Layout& l);
  std::set<std::vector<int>> seen;
  std::vector<Candidate> frontier;
  std::vector<Candidate> basins;  // seeds in other basins, not yet descended from (refine.cpp kExplore)
  std::set<std::vector<int>> descended;  // their layouts
  std::set<std::vector<int>> kicked;     // best layouts jumped from (refine.cpp twice_the_pipelines)
  double best = 1e300;
  // The best candidates of each route (the subclusters a pipeline passes through, in order),
  // at most Options::top_k each (refine.cpp keep_route says why).
  std::map<std::vector<int>, std::vector<Candidate>> routes;
  // The kept candidates of the routes whose best estimates within `slack` of the best route's:
  // the estimate cannot tell them apart, so auto's simulator ranks them all.
  std::vector<Candidate> close_routes(double slack) const;
  // Set while run_refine waits for its feed, having converged on everything it was given
  // (auto's convergence test presumes the refinement has explored around the plans found).
  std::atomic<bool> waiting{false};
};
// Candidates found elsewhere since the last call, or nullopt once none will come.
using Feed = std::function<std::optional<std::vector<Candidate>>()>;
// The refinement follows a neighbour only when it estimates within this share of its best
// (refine.cpp says why); auto gives it late seeds only within it too.
constexpr double kRefineSlack = 0.01;
// A seed up to this much worse than the refinement's best lies in another basin, worth a
// descent of its own once the best's basin has converged, if it is still within this of the
// best then (refine.cpp says why); auto gives it late seeds within it too.
constexpr double kExplore = 0.25;
// A member's plans auto gives its refinement: each that enters its kSeedsPerMember best
// (Work::entered; search.cpp portfolio_seeds says why).
constexpr std::size_t kSeedsPerMember = 4;
// What auto's settling refinement starts from, of its members' kept candidates (each member's
// best first): each member's kSeedsPerMember best, then the four best of all, best first.
std::vector<Candidate> portfolio_seeds(const std::vector<std::vector<Candidate>>& members);
// Best-first search over neighbouring layouts from `seeds`, the state's frontier and —
// with a feed — from what the feed gives between expansions (auto refines the slower
// members' plans while they run).
void run_refine(Work& w, Refinement& r, const std::vector<Candidate>& seeds, const Feed& more = nullptr);

// (dp, cp, tp) factorisations of `devices` for one stage of a subcluster: tp divides the
// heads and the node size, cp divides the sequence (and is 1 below 8192 tokens).
struct Shape3 {
  int dp, cp, tp;
};
std::vector<Shape3> factorisations(const Evaluator& eval, int sub, int devices);

// mcts's reward scale: the layers of the global batch over Σ devices' layer rates (the fastest
// per-sequence layer time over `micro_batch_sizes`, tp = 1, whether or not it fits memory).
double peak_work_bound(const Evaluator& eval, const std::vector<int>& micro_batch_sizes);
// Lower bounds on the iteration of every plan of the search's space (bound.cpp): layouts of k
// identical pipelines whose stages are runs of units on (dp, cp, tp) shapes of factorisations(),
// as the simulator times them.
// work_lower_bound: total work / total throughput, where each subcluster's throughput is that
// of its best stage shape (tp, cp), micro-batch and recomputation in which one layer with one
// micro-batch in flight fits a device — memory-forced tp, cp and recomputation, and their
// collectives, counted — and the work includes the embedding and the head. It assumes nothing
// else: no bubble, no transfer, no gradient sync and no optimizer step.
double work_lower_bound(const Evaluator& eval, const std::vector<int>& micro_batch_sizes);
// pipeline_lower_bound: the least T that some (pipelines P, micro-batch b) admits, where T
// admits (P, b) when the units can be cut into stages, each on some shape that holds its run
// with one micro-batch in flight, such that for every stage s
//   T >= pi_s + m·c_s          (the bubble: its first micro-batch arrives after the forwards
//                               of the stages before it, and its last gradient goes back
//                               through their backwards; pi_s the sum of their c's and of
//                               the hops between them, both ways)
//   T >= pf_s + m·c_s + tail_s (its gradient sync — over P·dp·cp replicas on the fastest block
//                               placement — and optimizer step follow its last backward, and
//                               its first micro-batch arrives after pf_s, the forward part of
//                               pi_s: the stages' forwards before it and the hops into them)
//   T >= m·hop                 (for each hop between subclusters, at least the link's latency
//                               and the activation over the nodes either side spans; a link
//                               direction carries one micro-batch at a time)
// with m = global batch / (P·b) and c_s the stage's forward + backward of a micro-batch, and
// the stages' devices over all pipelines fitting each subcluster (counted per cut, relaxed only
// where too many cuts meet: bound.cpp `feasible`). It charges too each stage's cap on
// micro-batches in flight: T >= m·(c_s + Σ_{t>s} c_t)/h_s, h_s what its memory holds (every
// schedule's warm-up count fits it; a micro-batch holds its place from its forward at s to its
// backward there), Σ_{t>s} c_t at least the fastest cut of the units after s. It leaves out
// the hops within a subcluster and gpt's tied-embedding ring, and charges a micro-batch the
// mean over the model's sequence lengths. `start`: a scale for T (the work bound); `upper`
// (0: none): an iteration some plan achieves (the search's best), so that ways of computing a
// stage that are slower are left out and the bound is at most it; 0 when nothing fits.
// `first`: the (P, b) to bound first (the search's best plan's), whose bound then caps the
// others. The test is not monotone in T everywhere, so another `upper` or `first` can end the
// bisection at another T that fails it: a bound all the same (every T the test fails is one),
// though not always the same one. Measured (2026-12-06, bench_converge): on the 50 mid-size
// instances twice the search's best as `upper` moved 5 bounds, 1.2 times it with no `first`
// 5, by -3% to +10%; the 16 seed setups, exp3 and 10,000 devices kept theirs.
struct Pipelining {
  int pipelines = 0, micro_batch = 0;
};
double pipeline_lower_bound(const Evaluator& eval, const std::vector<int>& micro_batch_sizes, double start, double upper,
                            Pipelining first = {});
// The bound printed with a plan: the larger of the two.
double lower_bound(const Evaluator& eval, const std::vector<int>& micro_batch_sizes, double upper, Pipelining first = {});

}  // namespace het::search
