#pragma once
// The largest count or size every input may hold (model, cluster, catalog, profile, plan,
// inventory). Each is far above any model or cluster in use, so a real input never meets one;
// what they stop is a typo or a hostile file that would make the planner allocate gigabytes,
// overflow an int, or search for minutes. The parsers report a value past its limit at its
// file, line and field ("expected a whole number at most 1024 (the limit on devices per node),
// got '5000'"); products of counts (nodes x devices_per_node, tokens per iteration,
// dp x cp x tp) are computed with checked_product() in 64 bits and held to their own limits.
// The table of limits and reasons is in docs/inputs.md, "Limits"; a file's size is capped by
// input::read_file().
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "input/input.hpp"

namespace het::limits {

// ---- model --------------------------------------------------------------------------------
// 8x the deepest model trained at scale (128 layers: Megatron-LM's 1T GPT); DeepNet's
// 1,000-layer transformer fits. The search's dynamic programs grow with the layers squared.
inline constexpr input::Limit kLayers{1024, "layers"};
// 5x the widest published model (hidden 25,600: Megatron-LM's 1T GPT).
inline constexpr input::Limit kHiddenSize{131'072, "the hidden size"};
// 8x the hidden-size limit: Gemma's 8x MLP is the widest ratio in use.
inline constexpr input::Limit kFfnHiddenSize{1'048'576, "the MLP's hidden size"};
// 6x the most heads published (160: Megatron-LM's 1T GPT); kv-heads divide them.
inline constexpr input::Limit kAttentionHeads{1024, "attention heads"};
// 16x the largest vocabulary in use (262,144 tokens: Gemma 3).
inline constexpr input::Limit kVocabSize{4'194'304, "the vocabulary"};
// 4x the longest contexts models are trained at (1,048,576 tokens).
inline constexpr input::Limit kSeqLength{4'194'304, "the sequence length"};
// 4x the largest LLM batch published (15,360 sequences: DeepSeek-V3), and LAMB's 65,536 for
// BERT. The simulator runs every micro-batch of every candidate, so the search's time grows
// with it: at this limit a 1 s search of HetAuto's exp3 took 1.5 s (9.9 s before the simulator
// stopped naming trace events it did not record).
inline constexpr input::Limit kGlobalBatchSize{65'536, "sequences in the global batch"};
// 16x the largest batch in tokens published (63M: DeepSeek-V3's 15,360 x 4,096); keeps the
// tokens of an iteration (global batch x sequence length) within a 32-bit int.
inline constexpr std::int64_t kTokensPerIteration = std::int64_t{1} << 30;
// Micro-batch sizes the search tries (each multiplies its work); every power of two up to the
// global-batch limit is 17.
inline constexpr input::Limit kMicroBatchChoices{64, "micro-batch sizes"};
// Buckets of a sequence-length distribution (model.seq_lengths): the predictor costs every
// stage once per bucket; Hetu-B's bucketing uses 16 at most.
inline constexpr input::Limit kSeqLengthBuckets{64, "sequence-length buckets"};
// none, selective, full: each at most once (a longer list repeats one).
inline constexpr input::Limit kRecomputeChoices{3, "recompute options"};

// ---- cluster ------------------------------------------------------------------------------
// 5x the largest GPU cluster reported (200,000: xAI's Colossus). A plan for this many devices
// is ~40 MiB of JSON, within input::kMaxDocumentBytes.
inline constexpr input::Limit kDevices{1'048'576, "devices in a cluster"};
inline constexpr input::Limit kNodes{kDevices.max, "nodes in a subcluster"};  // a node has a device at least
// A node as `hetexec devices --format cluster` writes it has a device per CPU thread: two
// 192-core sockets with SMT are 768; NVLink domains of 72 (NVL72) to 576 GPUs fit.
inline constexpr input::Limit kDevicesPerNode{1024, "devices per node"};
// 8x the device types of bench/bench_scale's largest cluster (8). The search's spaces grow
// with the subclusters' orders (MCTS lists at most 2^17 of them, search/mcts.cpp).
inline constexpr input::Limit kSubclusters{64, "subclusters"};
// One link per pair of subclusters.
inline constexpr input::Limit kLinks{kSubclusters.max * (kSubclusters.max - 1) / 2, "links, one per pair of subclusters"};
// 50x the device types of the shipped catalog (configs/devices.yaml, ~20).
inline constexpr input::Limit kCatalogDevices{1024, "devices in the catalog"};

// ---- profile ------------------------------------------------------------------------------
// 3x a sweep of 5 unit kinds x 8 tp x 8 cp x 8 micro-batch sizes x 8 sequence lengths.
inline constexpr input::Limit kProfileRows{65'536, "profile rows"};
inline constexpr input::Limit kAssumptions{1024, "assumptions"};

// ---- plan ---------------------------------------------------------------------------------
// Each pipeline takes at least one sequence of the global batch.
inline constexpr input::Limit kPipelines{kGlobalBatchSize.max, "pipelines, each taking a sequence of the global batch at least"};
// A stage holds one unit at least: the embedding, two per layer (sublayer granularity), the head.
inline constexpr input::Limit kStages{2 * kLayers.max + 2, "stages in a pipeline"};
inline constexpr input::Limit kUnitIndex{2 * kLayers.max + 1, "a unit's index"};
// A plan records one profile per device type of its cluster.
inline constexpr input::Limit kPlanProfiles{kSubclusters.max, "profiles, one per device type"};
// Stages x num_microbatches summed over a plan's pipelines: the steps the simulator takes,
// holding 24 bytes for each (100 MiB here); 16x a 128-stage pipeline of 2,048 micro-batches.
// The search skips candidates past it (a 1,024-layer model with a global batch of 65,536 had
// it simulate for 20 s after a 1 s budget).
inline constexpr input::Limit kScheduleSteps{std::int64_t{1} << 22, "stages x micro-batches summed over the pipelines"};
// One row per algorithm of the search (7 today).
inline constexpr input::Limit kAlgorithmResults{64, "algorithm results"};

// a x b x ..., or nullopt when the product does not fit in 64 bits.
inline std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t out = 1;
  for (std::int64_t f : factors)
    if (__builtin_mul_overflow(out, f, &out)) return std::nullopt;
  return out;
}

}  // namespace het::limits
