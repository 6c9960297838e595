#pragma once
// The algorithms behind search::run (internal to the search module).
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "search/evaluator.hpp"
#include "search/search.hpp"

namespace het::search {

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
  // The same for a fixed unit split (first unit of each stage; empty: the best split).
  void consider_split(Layout layout, const std::vector<int>& first_unit);
  void offer(const Candidate& c);
  double best() const;
  std::vector<Candidate> take();
  // Complete plans that a layout cannot express (pipelines of different shapes); run()
  // predicts them like the candidates.
  void offer_plan(Plan plan);
  std::vector<Plan> take_plans();
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  std::int64_t layouts() const { return layouts_.load(); }
  void count(std::int64_t n = 1) { layouts_ += n; }
  bool timed_out() const { return timed_out_.load(); }
  void note_progress(const std::string& what) const;

 private:
  std::chrono::steady_clock::time_point deadline_;
  mutable std::mutex mutex_;
  std::vector<Candidate> top_;
  std::vector<Plan> plans_;
  std::atomic<std::int64_t> layouts_{0};
  mutable std::atomic<bool> timed_out_{false};
  mutable std::chrono::steady_clock::time_point last_progress_{};
};

void run_uniform(Work& w);
void run_exhaustive(Work& w);
void run_hapt(Work& w);
void run_heteroauto(Work& w);
void run_mcts(Work& w);
// HexiScale §4: METIS parts of the cluster as differently-shaped pipelines (hexiscale.cpp).
void run_hexiscale(Work& w);
// Best-first search from the given candidates over neighbouring layouts (refine.cpp).
void run_refine(Work& w, const std::vector<Candidate>& seeds);

// (dp, cp, tp) factorisations of `devices` for one stage of a subcluster: tp divides the
// heads and the node size, cp divides the sequence (and is 1 below 8192 tokens).
struct Shape3 {
  int dp, cp, tp;
};
std::vector<Shape3> factorisations(const Evaluator& eval, int sub, int devices);

// Total work / total effective throughput: the layers of the global batch over Σ devices'
// layer rates (the fastest per-sequence layer time over `micro_batch_sizes`, tp = 1).
double work_lower_bound(const Evaluator& eval, const std::vector<int>& micro_batch_sizes);

}  // namespace het::search
