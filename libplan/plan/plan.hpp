#pragma once
// The execution plan (hetplan.plan/v1; docs/plan-format.md, DESIGN.md §5).
//
// A plan is self-contained: it embeds the model and cluster it was made for. Its decision
// fields (schedule kind, pipelines, stages with subcluster/layers/tp/cp/dp/devices/recompute,
// micro-batching) say what to run; its derived fields (warm-up counts, predictions, the
// search's statistics) are optional on input and recomputed by the simulator.
//
// Units: the unit sequence is `embedding, layer 0 .. layer L-1, head` (granularity
// `layer`, L+2 units) or `embedding, attn 0, mlp 0, .., attn L-1, mlp L-1, head`
// (granularity `sublayer`, 2L+2 units). A stage's `layers: [first, last]` is an inclusive
// range over that sequence.
//
// Micro-batches: a pipeline runs num_microbatches micro-batches of micro_batch_size
// sequences each per iteration; a stage with dp = d gives each of its d replicas
// micro_batch_size / d of them. Σ over pipelines of micro_batch_size × num_microbatches is
// the global batch.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het {

enum class ScheduleKind { gpipe, one_f_one_b, eager_1f1b, h_1f1b, virtual_1f1b };
const char* to_string(ScheduleKind k);  // "gpipe", "1f1b", "eager-1f1b", "h-1f1b", "virtual-1f1b"

// How a micro-batch's activations (and backward their gradients) move from a stage to the
// next when their (dp, cp, tp) differ; program/program.hpp lists each strategy's messages.
enum class Resharding { all_pairs, gather_send_scatter, inner_dp_rank0, send_recv_allgather };
inline constexpr Resharding kReshardings[] = {Resharding::all_pairs, Resharding::gather_send_scatter,
                                              Resharding::inner_dp_rank0, Resharding::send_recv_allgather};
const char* to_string(Resharding r);  // "all-pairs", "gather-send-scatter", "inner-dp-rank0", "send-recv-allgather"
std::optional<Resharding> parse_resharding(const std::string& text);

enum class Granularity { layer, sublayer };
const char* to_string(Granularity g);

// The number of units in the model's unit sequence at this granularity.
int num_units(const ModelSpec& model, Granularity granularity);
// "embedding", "layer 3", "attn 3", "mlp 3", "head".
std::string unit_name(const ModelSpec& model, Granularity granularity, int unit);

struct DeviceRef {
  int node = 0;    // index of the node within the stage's subcluster
  int device = 0;  // index of the device within the node
  friend bool operator==(const DeviceRef&, const DeviceRef&) = default;
};

struct StagePrediction {
  double forward_s = 0;      // per micro-batch
  double backward_s = 0;     // per micro-batch
  double memory_bytes = 0;   // peak per device
};

struct Stage {
  std::string subcluster;
  int first = 0, last = 0;   // inclusive unit range
  int tp = 1, cp = 1, dp = 1;
  Recompute recompute = Recompute::none;
  std::vector<DeviceRef> devices;  // dp*cp*tp, ordered tp fastest, then cp, then dp
  std::optional<int> warmup;       // forwards before the first backward
  // To the next stage (none on the last). Derived: the cheapest strategy; may be set by hand.
  std::optional<Resharding> resharding;
  std::optional<StagePrediction> predicted;
  int line = 0;                    // where the stage is in its file (0 when made in code)
};

struct Pipeline {
  int micro_batch_size = 1;
  int num_microbatches = 1;
  // With model.seq_lengths: micro-batches of each bucket (index: the model's bucket), summing
  // to num_microbatches; a micro-batch holds sequences of one bucket (plan file: `seq_lengths:
  // [{length: 1024, microbatches: 6}, ...]`; plan/buckets.hpp orders and spreads them). Empty
  // without seq_lengths.
  std::vector<int> bucket_microbatches;
  std::vector<Stage> stages;
  int line = 0;
};

struct AlgorithmResult {
  std::string name;
  double iteration_s = 0;  // 0: found nothing
  double seconds = 0;
  std::int64_t candidates_evaluated = 0;
};

struct AlgorithmInfo {
  std::string name;                     // the algorithm asked for (auto, hapt, ...)
  double seconds = 0;
  std::int64_t candidates_evaluated = 0;
  double lower_bound_s = 0;             // total work / total effective throughput
  double gap = 0;                       // predicted iteration / lower bound - 1
  std::vector<AlgorithmResult> results; // every algorithm that ran, with its best plan's time
};

// A profile the plan was predicted with (docs/plan-format.md, "Profiles"; plan/profiles.hpp
// chooses them): its device type, the SHA-256 of the profile file's bytes (which file it
// was), and the profile itself, so that the plan reproduces its prediction without the file.
// `document` is the file's YAML tree as JSON (input::to_json), whatever fields the profile
// format has; `profile` is what read_profile() makes of it. A plan may record only the
// digest (it was written before plans embedded profiles, or the profile was removed):
// then both are empty.
struct PlanProfile {
  std::string device;
  std::string sha256;
  nlohmann::ordered_json document;     // null when not embedded
  std::optional<ProfileSpec> profile;  // set exactly when document is
  int line = 0;                        // where the entry is in its file (0 when made in code)
};

struct Prediction {
  double iteration_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double bubble_fraction = 0;
  double load_balance_eta = 0;
  double cross_cluster_bytes = 0;
  double cross_overlap = 1;  // share of cross-subcluster transfer time hidden behind compute
  // The rent of the devices the plan uses (their DeviceSpec::price), and what a million tokens
  // cost at it; absent when one of them has no price.
  std::optional<double> cost_usd_per_hour, usd_per_million_tokens;
  nlohmann::ordered_json per_stage = nlohmann::ordered_json::array();  // simulator's detail, kept as is
};

struct Plan {
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<PlanProfile> profiles;  // at most one per device type
  std::optional<AlgorithmInfo> algorithm;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  Granularity granularity = Granularity::layer;
  std::vector<Pipeline> pipelines;
  std::optional<Prediction> predicted;
};

}  // namespace het
