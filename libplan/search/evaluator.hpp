#pragma once
// The searches' common ground (DESIGN.md §8): a layout (k identical pipelines, each a
// sequence of stage shapes — subcluster and (dp, cp, tp) — with a micro-batch size and a
// schedule), the best assignment of units and recomputation to its stages under a fast
// analytic estimate, and the plan it becomes.
//
// With a sequence-length distribution (model.seq_lengths) a micro-batch costs the mean over
// its buckets, weighted by share, and holds the activations of the longest.
//
// Estimate: the split's pipeline simulated (sim::simulate_pipeline: stage i's forward and
// backward f_i, b_i per micro-batch, its hop c_i to stage i+1 in each direction, the schedule's
// warm-up counts N_i, m micro-batches), never below HAPT §5.2 eq. 13 with the hops pacing as
// stages do,
//   T ≥ Σ_i (t_i + 2c_i) + (m − 1)·max(t_max, max_i c_i),    t_i = f_i + b_i,
// then the gradient sync not hidden by the last backward and the optimizer step. The
// simulated makespan is what predict computes for the plan; it falls below eq. 13 only where
// faster stages hide behind the slowest one's warm-ups, and eq. 13 is what the pruning below
// takes as every split's least estimate. Every stage must hold N_i micro-batches in flight as
// predict's memory counts them (cost::stage_memory, StageTable::memory; test `property: the
// search's memory of a stage is predict's`).
//
// best_split(): for each candidate t_max (smallest feasible first, found by binary search, then
// upward while (m−1)·t_max can still beat the best; HAPT §5.2's bidirectional pruning) a DP
// over (stage, first unit) minimises Σ t_i with t_i ≤ t_max, choosing each stage's
// recomputation; the best estimate of those splits wins.
// Thread-safe: const methods may run concurrently.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <tbb/concurrent_unordered_map.h>

#include "cost/compute.hpp"
#include "plan/plan.hpp"
#include "predict/predict.hpp"

namespace het::search {

struct StageShape {
  int sub = 0;  // index into cluster.subclusters
  int dp = 1, cp = 1, tp = 1;
  int devices() const { return dp * cp * tp; }
  friend bool operator==(const StageShape&, const StageShape&) = default;
};

struct Layout {
  int pipelines = 1;               // identical pipelines (data-parallel replicas)
  std::vector<StageShape> stages;  // in pipeline order
  int micro_batch_size = 1;        // per pipeline micro-batch
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
};

// Per-unit prefix sums of one stage shape at one placement: time per micro-batch (forward +
// backward, and backward alone), parameters, activation bytes per micro-batch, and layers
// (a sublayer unit counts 1/2).
struct StageTable {
  std::vector<double> time, backward, params, whole, act, layers;  // prefix sums, size units + 1 (whole: predict::whole_parameters)
  double bytes_per_param = 0;  // model state per parameter on a device (ZeRO applied)
  std::vector<double> state;   // prefix sums of a unit's model state on a device: ((params − whole) / tp + whole) × bytes_per_param
  // What cost::stage_memory adds, so that a stage fits here exactly when predict's memory (and
  // its cap on warm-ups) says so: per micro-batch in flight, the stage's own buffers (the head's
  // logits; on the CPU backend tokens, targets and a fully recomputing stage's kept input),
  // [has embedding][has head]; once, the backward's temporaries, [has layers][has head]; per
  // layer with a micro-batch in flight, a fully recomputing layer's recomputed set (CPU).
  double buffers[2][2] = {}, workspace[2][2] = {}, recompute_per_layer = 0;
  double tied = 0;             // predict::tied_head_parameters: held by a head without the embedding
  double capacity = 0;         // what a stage may use: (memory − reserve) × (1 − memory headroom)
  double fastest_layer = 0;    // the least time of one unit between the embedding and the head
  const DeviceSpec* device = nullptr;  // the subcluster's, in the evaluator's cluster
  double sum(const std::vector<double>& v, int a, int e) const { return v[e + 1] - v[a]; }
  // Memory of units a..e holding `in_flight` micro-batches on a device of the table's shape (a
  // head without the embedding holds the tied weights whole, as every TP shard does `whole`).
  double memory(int a, int e, int in_flight, bool has_head) const {
    const double n_layers = sum(layers, a, e);
    return sum(state, a, e) + (has_head && a > 0 ? tied * bytes_per_param : 0) +
           in_flight * (sum(act, a, e) + buffers[a == 0][has_head]) + workspace[n_layers > 0][has_head] +
           (in_flight > 0 ? n_layers * recompute_per_layer : 0);
  }
};

struct Candidate {
  Layout layout;
  std::vector<int> first_unit;      // stage i holds units [first_unit[i], first_unit[i+1]) (last: to the end)
  std::vector<Recompute> recompute;
  double estimate_s = 0;
};

class Evaluator {
 public:
  Evaluator(const ModelSpec& model, const ClusterSpec& cluster, const cost::ComputeModel& compute,
            std::vector<Recompute> recompute_options, Granularity granularity, const predict::Options& predict);

  // The layout under each of `schedules` (its own schedule is ignored), preparing it once: the
  // best split — or the given `first_unit` split — and each stage's recomputation. Nothing when
  // the layout is impossible (batch, devices), no split fits memory, or its lower bound,
  // (m − 1) · L / Σ_i 1/layer_time_i (the steady phase of a perfectly balanced split without
  // recomputation), is at least `cutoff`: it cannot beat what the caller already has. With a
  // cutoff, a schedule yields a split only when one estimates below the cutoff, and the best
  // one only then (the search for better splits stops where none could get below it): every
  // split pays (m − 1)·t_max plus each unit's fastest time and the hops there and back, so one
  // feasibility test at the t_max that would reach the cutoff rules a layout out. `cut`, when
  // given, is set when the layout fits memory (or was not tried) but could not beat the cutoff.
  std::vector<Candidate> evaluate(const Layout& layout, const std::vector<ScheduleKind>& schedules,
                                  const std::vector<int>* first_unit = nullptr, double cutoff = kNoCutoff,
                                  bool* cut = nullptr) const;
  // The best split under the layout's own schedule.
  std::optional<Candidate> best_split(const Layout& layout) const;
  // The lower bound evaluate() prunes with ((m − 1) · L / Σ_i 1/layer_time_i): no split of the
  // layout estimates below it. Nothing when the layout is impossible (batch, devices).
  std::optional<double> bound(const Layout& layout) const;
  static constexpr double kNoCutoff = 1e300;
  // The plan of a candidate: devices assigned in order within each subcluster.
  Plan to_plan(const Candidate& c) const;

  int num_units() const { return units_; }
  const ModelSpec& model() const { return model_; }
  const ClusterSpec& cluster() const { return cluster_; }
  double headroom() const { return predict_.memory_headroom; }
  // Whether a layout's devices fit the cluster and its micro-batching the global batch.
  bool admissible(const Layout& layout) const;
  // The table of stage `stage` of `layout` placed from device `offset` of its subcluster.
  const StageTable& table(const Layout& layout, int stage, int offset, Recompute r) const;
  // The hop c_i (mean of forward and backward, predict::hop) from a stage of shape `a` on the
  // devices from `offset_a` of its subcluster to one of shape `b` from `offset_b`, with
  // `sharers` pipelines on the same NICs; memoised by the node pattern of both blocks.
  double hop(const StageShape& a, int offset_a, const StageShape& b, int offset_b, int micro_batch_size, int sharers) const;
  // The gradient-sync links of stage shape `sh` with `pipelines` copies side by side from device
  // `offset` of its subcluster (predict::sync_link): per shard, and the ring over every holder
  // of the parameters held whole; memoised by what the rings depend on: the subcluster, tp,
  // the devices of all copies and the offset within a node.
  std::pair<LinkSpec, LinkSpec> sync_links(const StageShape& sh, int pipelines, int offset) const;
  const std::vector<Recompute>& recompute_options() const { return recompute_; }
  const predict::Options& predict_options() const { return predict_; }
  // The same without Prediction::per_stage: for the search's own rankings of plans it does
  // not return as they are (mcts's entrants, hexiscale's parts and their joins).
  predict::Options ranking_options() const {
    predict::Options o = predict_;
    o.per_stage = false;
    return o;
  }
  const cost::ComputeModel& compute() const { return compute_; }
  Granularity granularity() const { return granularity_; }

 private:
  using Table = StageTable;
  struct Prepared;             // a layout with its stage tables, hops and warm-up inputs
  std::optional<Prepared> prepare(const Layout& layout) const;
  double lower_bound(const Prepared& p) const;
  // Why solve() found no split that beats the cutoff: none fits at the t_max that would reach
  // it (one feasibility test; with more warm-ups per stage none fits either), or splits fit but
  // none estimated below it.
  enum class Cut { no, infeasible, estimated };
  std::optional<Candidate> solve(const Prepared& p, const std::vector<int>* fixed_split, double cutoff, Cut& cut) const;

  ModelSpec model_;
  ClusterSpec cluster_;
  const cost::ComputeModel& compute_;
  // Each bucket of model.seq_lengths (without: one, the model itself, share 1): its model,
  // compute model and share of the micro-batches (identical pipelines run the buckets in
  // proportion: plan/buckets.hpp), so a micro-batch costs their mean; `longest_` holds the
  // activations.
  struct Length {
    ModelSpec model;
    cost::ComputeModel compute;
    double share = 0;
  };
  std::vector<Length> lengths_;
  ModelSpec longest_;
  std::vector<Recompute> recompute_;
  Granularity granularity_;
  predict::Options predict_;
  int units_;
  // The memos below, each looked up by every stage of every layout evaluated and filled once
  // per key: hashed fixed-size keys (issue 20: ordered maps of vectors took a third of an
  // evaluation on 10,000 devices) in maps whose lookups take no lock (a lock taken shared for
  // every lookup took a tenth of the refinement's time there: its readers' counter moves
  // between the cores). Two threads may compute one key at once; the first stored is kept
  // (both computed the same value), and an entry never moves once stored.
  template <std::size_t N>
  using Key = std::array<int, N>;
  struct KeyHash {
    template <std::size_t N>
    std::size_t operator()(const Key<N>& k) const {
      std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the ints
      for (int v : k) h = (h ^ static_cast<std::uint32_t>(v)) * 0x100000001b3ULL;
      return static_cast<std::size_t>(h);
    }
  };
  template <std::size_t N, class T>
  using Memo = tbb::concurrent_unordered_map<Key<N>, T, KeyHash>;
  mutable Memo<10, std::unique_ptr<Table>> tables_;
  mutable Memo<13, double> hops_;
  mutable Memo<4, std::pair<LinkSpec, LinkSpec>> sync_links_;  // a stage's gradient-sync links: per shard, whole
  mutable Memo<11, LinkSpec> tied_links_;                      // gpt's tied-embedding ring: both ends' shapes and blocks
};

}  // namespace het::search
