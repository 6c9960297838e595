#pragma once
// The per-stage pieces of a prediction, shared by predict() and the searches so that both
// cost a stage the same way: where a stage's devices sit, which units it holds, the time
// of one unit on the stage (compute + recomputation + TP/CP collectives), its memory shape,
// and the hop to the next stage with its resharding strategy (see predict.hpp).
#include "cost/compute.hpp"
#include "cost/memory.hpp"
#include "plan/plan.hpp"
#include "predict/predict.hpp"
#include "program/program.hpp"

namespace het::predict {

struct Placement {
  const SubclusterSpec* sub = nullptr;
  int nodes = 0;           // distinct nodes used
  int per_node = 0;        // most devices used on one node (they share its NIC)
  bool tp_in_node = true;  // every TP group lies inside one node
};
Placement place(const Stage& s, const ClusterSpec& cluster);
// The same for `count` consecutive devices from device `offset` of `sub` in node-major order
// (device k on node k / devices_per_node), in O(count / tp) and without the device list: the
// searches place thousands of such blocks a second (issue 20).
Placement place_block(const SubclusterSpec& sub, int offset, int count, int tp);

// The link of a collective among a stage's devices: intra-node when it stays in a node,
// else the node NIC shared by the stage's devices on that node.
LinkSpec group_link(const Placement& p, bool within_node);

struct UnitCounts {
  double layers = 0;  // transformer layers (sublayer units count 1/2)
  int attn = 0, mlp = 0, full_layers = 0;
  bool embedding = false, head = false;
};
UnitCounts count_units(const Plan& plan, const Stage& s);
// Parameters of one unit, whole (before TP): the embedding's token table (and gpt's position
// table), a layer's weights, the head's final norm (and llama's untied output projection).
double unit_parameters(const ModelSpec& m, UnitKind kind);
// A stage's parameters: its units', and gpt's token embedding on a stage with the head but not
// the embedding (the head's logits reuse it: that stage holds, updates and syncs a copy).
double stage_parameters(const ModelSpec& m, const UnitCounts& c);
// The copy of the token embedding a gpt head without the embedding holds (0 for llama).
double tied_head_parameters(const ModelSpec& m);
// Of a unit's parameters, those every TP shard holds whole (libexec/model: the norms, gpt's
// output biases bo and bproj, the embeddings, llama's output projection); the rest are split
// over TP (tp_sharded() in libexec/runtime/sync_plan.cpp).
double whole_parameters(const ModelSpec& m, UnitKind kind);

// ---- After the last backward: gradient sync and optimizer step (one source for predict()
// and the searches' estimate) ----

// The link of a stage's gradient-sync rings. The members are the stages holding the same
// units (replicas across pipelines). A family split over TP (Rings::per_shard) syncs on one ring
// per TP shard over all members' replicas and context members (libexec/runtime's chunks), the
// rings side by side; a family every shard holds whole (Rings::one: norms, gpt's biases and
// tied embedding) on one ring over every holder. A ring inside one node uses the intra-node
// links; else a node's NIC is shared by the rings with a member on it (rings visit each node's
// members in a row, as ranks are ordered: one flow leaves a node per ring, so one ring alone
// has it to itself). A ring runs at its slowest hop's bandwidth (a link between subclusters is
// per node, shared the same way), and its latency is the mean of its hops' in rank order
// (chunks are pipelined around it: a ring over two subclusters pays their link's latency about
// twice per lap, not at every step).
enum class Rings { per_shard, one };
LinkSpec sync_link(const ClusterSpec& cluster, const std::vector<const Stage*>& members, Rings rings);

// The gradient sync as the runtime runs it (libexec/runtime/sync_plan.hpp and runtime.cpp):
// every parameter is summed over the ranks that hold the same slice of it — the layers' over
// the stages holding the layer, gpt's tied token embedding over the first and last stages, the
// parameters every TP shard holds whole (norms, some biases, embeddings) over all TP shards too
// — and a rank packs the parameters of one group into one bucket, reduced by one ring
// collective, bucket after bucket in the order of sync_buckets. At the stage level (the TP
// shards of a stage sync their shards' buckets side by side) a bucket is: the stages that hold
// it, its ring's size and link, the elements per rank, and its order keys (its units, the ranks
// of shard 0's group). Buckets of one rank (ring size 1) are left out: they move nothing.
struct SyncBucket {
  std::vector<std::pair<int, int>> members;  // (pipeline, stage), ascending
  std::vector<int> order;                    // the ranks of shard 0's group, ascending
  int lowest = 0, highest = 0;               // the units its parameters belong to (gpt's tied embedding: 0 and the last)
  int ring = 1;                              // ranks in one ring
  double elements = 0;                       // per rank and collective
  int collectives = 1;                       // per rank, one after the other (finer TP chunks of other holders)
  LinkSpec link;
};
// In the order the runtime reduces them (runtime::plan_sync): by lowest unit, descending, then
// highest unit, then order — a rank's buckets in the order its backward finishes them, and gpt's
// tied embedding (units 0 and the last) after each end's own buckets, so that the last stage
// syncs its own while stage 0 is still in its backward. One total order on groups: any two ranks
// meet the groups they share in the same order.
std::vector<SyncBucket> sync_buckets(const Plan& plan);
// The searches' estimate of one stage's own buckets, summed (a stage of `replicas` copies over
// data parallelism, context parallelism and identical pipelines, holding `params` parameters
// of which `whole` every TP shard holds whole, both without gpt's tied token embedding): the
// split ones over the replicas on `link` (Rings::per_shard), the whole ones over the replicas'
// TP shards too on `whole_link` (Rings::one; one bucket with the split ones when tp is 1).
double stage_sync_s(const ModelSpec& m, double params, double whole, int tp, int replicas, const LinkSpec& link,
                    const LinkSpec& whole_link);
// The searches' estimate of gpt's tied embedding's bucket: `tied` parameters over `ring` ranks
// (both ends' replicas) on `link`.
double tied_sync_s(const ModelSpec& m, double tied, int ring, const LinkSpec& link);
// Seconds of one bucket: its collectives' ring all-reduce of the model's dtype.
double bucket_sync_s(const ModelSpec& m, const SyncBucket& b);
// Mixed-precision AdamW is memory-bound: per parameter it reads the fp32 master weight, both
// fp32 moments and the 16-bit gradient (14 bytes) and writes the master weight, the moments
// and the 16-bit weight (14 bytes).
inline constexpr double kAdamBytesPerParameter = 28;
// Seconds of the optimizer step of a stage of TP degree `tp` on `device`, of `params` parameters
// of which `whole` every TP shard holds whole (whole_parameters: norms, the embedding, the head;
// the rest is split over the tp shards), sharded `shard` ways by ZeRO: the profile's measured
// step of a layer's parameters at that tp, per parameter (the step is elementwise: the
// embedding's and head's parameters cost as much each as a layer's), where it has one; else
// kAdamBytesPerParameter at the device's memory bandwidth; times the parameters one device holds,
// (params - whole) / tp + whole, over shard.
double optimizer_s(const cost::ComputeModel& compute, const ModelSpec& m, const DeviceSpec& device, int tp, double params,
                   double whole, double shard);

// The memory model's view of a stage.
cost::StageShape shape_of(const Plan& plan, const Pipeline& p, const Stage& s, int zero_dp, int in_flight);

// One unit's time per micro-batch on a stage: compute, recomputation added to the backward,
// and (for analytic compute) the TP all-reduces and CP K/V exchanges.
struct UnitTimes {
  double forward_s = 0, backward_s = 0;
  cost::Source source = cost::Source::analytic;
  double collectives_s = 0;  // the TP and CP collectives in forward_s and backward_s together
};
UnitTimes unit_times(const ModelSpec& m, const cost::ComputeModel& compute, UnitKind kind, const Placement& pl, int tp,
                     int cp, Recompute recompute, double sequences);
int source_rank(cost::Source s);  // profile 0 .. analytic 3

// One micro-batch's hop from stage a to the next stage b, costed from exactly the messages the
// runtime sends (program::reshard): activations forward, gradients back by the same strategy.
// A phase of messages takes, after the slowest link's latency, as long as its busiest
// resource: a device's intra-node link (per direction), a node's NIC inside the subcluster, a
// node's share of the link between subclusters (the link bandwidth is per node), and for bytes
// that leave the subcluster the D2H copy before and the H2D copy after (HetAuto §5.1).
// `sharers`: how many pipelines send over the same node NICs at once (identical pipelines side
// by side); they divide the inter-node and cross-subcluster bandwidth. The strategy is the
// options', else the plan's (a.resharding), else the cheapest forward + backward.
struct Hop {
  double forward_s = 0, backward_s = 0;
  double cross_bytes = 0;  // bytes per direction that cross between the two stages' subclusters
  double most_received = 0;  // forward bytes the busiest rank of the second stage takes straight off the link
  Resharding strategy = Resharding::all_pairs;
};
// The tensor is [micro_batch_size, seq_length, hidden] of the model's dtype.
Hop hop(const Stage& a, const Stage& b, const ModelSpec& model, int micro_batch_size, const ClusterSpec& cluster,
        const Options& opt, double sharers = 1);

}  // namespace het::predict
