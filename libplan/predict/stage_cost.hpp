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

// The link of a collective among a stage's devices: intra-node when it stays in a node,
// else the node NIC shared by the stage's devices on that node.
LinkSpec group_link(const Placement& p, bool within_node);

struct UnitCounts {
  double layers = 0;  // transformer layers (sublayer units count 1/2)
  int attn = 0, mlp = 0, full_layers = 0;
  bool embedding = false, head = false;
};
UnitCounts count_units(const Plan& plan, const Stage& s);
double stage_parameters(const ModelSpec& m, const UnitCounts& c);

// The memory model's view of a stage.
cost::StageShape shape_of(const Plan& plan, const Pipeline& p, const Stage& s, int zero_dp, int in_flight);

// One unit's time per micro-batch on a stage: compute, recomputation added to the backward,
// and (for analytic compute) the TP all-reduces and CP K/V exchanges.
struct UnitTimes {
  double forward_s = 0, backward_s = 0;
  cost::Source source = cost::Source::analytic;
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
  Resharding strategy = Resharding::all_pairs;
};
// The tensor is [micro_batch_size, seq_length, hidden] of the model's dtype.
Hop hop(const Stage& a, const Stage& b, const ModelSpec& model, int micro_batch_size, const ClusterSpec& cluster,
        const Options& opt, double sharers = 1);

}  // namespace het::predict
