#pragma once
// The rank program (DESIGN.md §2): what the ranks of a plan do, shared by the planner and the
// executor. The executor runs it; the planner costs exactly it; the transport's byte counts
// must equal it (tests/runtime_test.cpp counts them in real runs).
//
// Ranks: pipelines in order, their stages in order, each stage's devices in order (tp fastest,
// then cp, then dp). Rank (p, s, d, c, t) is TP shard t of context member c of data-parallel
// replica d of stage s of pipeline p. Replica d takes sequences [d·b, (d+1)·b) of each
// micro-batch (b = mbs/dp), member c the time steps [c·T/cp, (c+1)·T/cp). Activations are
// whole on every TP shard (no sequence parallelism), so the TP shards of a (d, c) hold the
// same block.
//
// Between two stages the activations of a micro-batch (and, backward, their gradients) move
// by one of the seeds' resharding strategies, each a list of messages in phases:
//   all-pairs            every rank of the receiving stage gets each part of its block straight
//                        from a sender holding it (HetAuto §5.2 strategy 1): tp_to × the tensor
//                        crosses.
//   gather-send-scatter  the sending stage gathers the whole tensor on its first rank, which sends
//                        it to the receiving stage's first rank, which scatters every rank its
//                        block (HetAuto §5.2 strategy 2): the tensor crosses once, on one path.
//   inner-dp-rank0       replicas d > 0 of the sending stage send their channel slices to
//                        replica 0 (its "inner-DP rank 0" ranks); those send, over cp·tp paths,
//                        to replica 0 of the receiving stage, which scatters to its replicas;
//                        then each TP group all-gathers its channels (HetAuto §5.2 strategy 3).
//   send-recv-allgather  every receiving rank gets 1/tp of its block's channels from the senders,
//                        then its TP group all-gathers them (H2 §5).
// Channel slice t of tp is the channels [C·t/tp, C·(t+1)/tp).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace het::program {

// ---- Where ranks are ------------------------------------------------------------------

struct Place {
  int pipeline = 0, stage = 0, replica = 0, context = 0, shard = 0;
};

class Topology {
 public:
  explicit Topology(const Plan& plan);
  int ranks() const { return static_cast<int>(places_.size()); }
  const Place& place(int rank) const { return places_[static_cast<std::size_t>(rank)]; }
  const Stage& stage_of(int rank) const;
  const Pipeline& pipeline_of(int rank) const;
  const DeviceRef& device_of(int rank) const;  // the stage's device the rank runs on
  // The rank of device `index` of stage s of pipeline p (index in Stage::devices order).
  int rank(int pipeline, int stage, int index) const;
  int rank(int pipeline, int stage, int replica, int context, int shard) const;
  // The TP shards of the rank's (replica, member), in shard order.
  std::vector<int> tp_group(int rank) const;
  // The context members of the rank's (replica, shard), ordered so that after a ring
  // reduce-scatter member c owns chunk c (transport::owned_chunk).
  std::vector<int> cp_ring(int rank) const;

 private:
  const Plan& plan_;
  std::vector<Place> places_;
  std::vector<std::vector<int>> first_;  // [pipeline][stage]: the stage's first rank
};

// ---- Resharding between stages ----------------------------------------------------------

// One micro-batch's tensor between two stages: [rows (sequences), time, channels].
struct Dims {
  int rows = 1, time = 1, channels = 1;
};

// A stage's parallel shape.
struct Shape {
  int dp = 1, cp = 1, tp = 1;
  int ranks() const { return dp * cp * tp; }
};
Shape shape_of(const Stage& s);

// A box of the tensor: rows [r0, r1) × time [t0, t1) × channels [c0, c1).
struct Block {
  int r0 = 0, r1 = 0, t0 = 0, t1 = 0, c0 = 0, c1 = 0;
  bool empty() const { return r0 >= r1 || t0 >= t1 || c0 >= c1; }
  std::size_t elements() const {
    return empty() ? 0 : std::size_t(r1 - r0) * std::size_t(t1 - t0) * std::size_t(c1 - c0);
  }
  Block operator&(const Block& o) const;  // intersection (possibly empty)
  friend bool operator==(const Block&, const Block&) = default;
};

// What stage rank `index` computes on: its replica's rows × its member's time steps × all channels.
Block block_of(const Shape& shape, const Dims& dims, int index);
// Channel slice t of tp: all rows and time steps, channels [C·t/tp, C·(t+1)/tp).
Block channel_slice(const Dims& dims, int t, int tp);

// An end of a message: the sending stage (side 0) or the receiving one (side 1), and the
// rank's index within its stage (Stage::devices order).
struct End {
  int side = 0, index = 0;
  friend bool operator==(const End&, const End&) = default;
};

// `block` goes from `from` to `to` in `phase`. A rank sends in phase k only what it held before
// phase k (its own block, or what it received in earlier phases), and receives each element of
// its final block exactly once; messages between one pair of ranks keep their list order.
struct Message {
  End from, to;
  Block block;
  int phase = 0;
};

// The messages that give every rank of the receiving stage (shape `to`) its whole block from
// the ranks of the sending stage (shape `from`), ordered by phase. Forward, the sending stage
// is s and the receiving one s + 1; backward (gradients) the other way round.
std::vector<Message> reshard(const Shape& from, const Shape& to, const Dims& dims, Resharding strategy);

// Elements a rank sends and receives in `messages`.
struct Traffic {
  std::size_t sent = 0, received = 0;
};
Traffic traffic(const std::vector<Message>& messages, const End& rank);

// ---- A rank's pipeline traffic -----------------------------------------------------------

// The strategy from stage s to s + 1 of a pipeline: the plan's (predict() always names one);
// all-pairs in a plan no simulator has completed.
Resharding strategy(const Pipeline& pipeline, int stage);

// One direction of one stage boundary as a rank sees it: the messages it sends or receives
// (list order) for one micro-batch, and the ranks at their other ends.
struct HopPart {
  End me;
  std::vector<Message> messages;
  std::vector<int> from_rank, to_rank;  // per message: the job ranks of its two ends
};

// The rank's parts of the hops around its stage s: activations from s − 1 and to s + 1,
// gradients from s + 1 and to s − 1 (empty at the pipeline's ends, and where the rank has
// no message).
struct StageHops {
  HopPart activations_in, activations_out, gradients_in, gradients_out;
};
StageHops hops_of(const Plan& plan, const Topology& topology, int rank);

// Elements the rank sends and receives between stages in one step (all micro-batches).
struct StepTraffic {
  Traffic activations, gradients;
};
StepTraffic step_traffic(const Plan& plan, const Topology& topology, int rank);

}  // namespace het::program
