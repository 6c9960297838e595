#include "program/program.hpp"

#include <algorithm>

namespace het::program {

// ---- Topology ---------------------------------------------------------------------------

Topology::Topology(const Plan& plan) : plan_(plan) {
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    first_.emplace_back();
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
      const Stage& st = plan.pipelines[p].stages[s];
      first_.back().push_back(ranks());
      for (int d = 0; d < st.dp; ++d)
        for (int c = 0; c < st.cp; ++c)
          for (int t = 0; t < st.tp; ++t) places_.push_back({int(p), int(s), d, c, t});
    }
  }
}

const Stage& Topology::stage_of(int r) const {
  const Place& pl = place(r);
  return plan_.pipelines[std::size_t(pl.pipeline)].stages[std::size_t(pl.stage)];
}

const Pipeline& Topology::pipeline_of(int r) const { return plan_.pipelines[std::size_t(place(r).pipeline)]; }

const DeviceRef& Topology::device_of(int r) const {
  return stage_of(r).devices[std::size_t(r - rank(place(r).pipeline, place(r).stage, 0))];
}

int Topology::rank(int p, int s, int index) const { return first_[std::size_t(p)][std::size_t(s)] + index; }

int Topology::rank(int p, int s, int d, int c, int t) const {
  const Stage& st = plan_.pipelines[std::size_t(p)].stages[std::size_t(s)];
  return rank(p, s, (d * st.cp + c) * st.tp + t);
}

std::vector<int> Topology::tp_group(int r) const {
  const Place& pl = place(r);
  std::vector<int> out;
  for (int t = 0; t < stage_of(r).tp; ++t) out.push_back(rank(pl.pipeline, pl.stage, pl.replica, pl.context, t));
  return out;
}

std::vector<int> Topology::cp_ring(int r) const {
  const Place& pl = place(r);
  const int cp = stage_of(r).cp;
  std::vector<int> out;
  for (int k = 1; k <= cp; ++k) out.push_back(rank(pl.pipeline, pl.stage, pl.replica, k % cp, pl.shard));
  return out;
}

// ---- Blocks -------------------------------------------------------------------------------

Shape shape_of(const Stage& s) { return {s.dp, s.cp, s.tp}; }

Block Block::operator&(const Block& o) const {
  return {std::max(r0, o.r0), std::min(r1, o.r1), std::max(t0, o.t0),
          std::min(t1, o.t1), std::max(c0, o.c0), std::min(c1, o.c1)};
}

Block block_of(const Shape& sh, const Dims& dims, int index) {
  const int d = index / (sh.cp * sh.tp), c = index / sh.tp % sh.cp;
  const int b = dims.rows / sh.dp, T = dims.time / sh.cp;
  return {d * b, (d + 1) * b, c * T, (c + 1) * T, 0, dims.channels};
}

Block channel_slice(const Dims& dims, int t, int tp) {
  return {0, dims.rows, 0, dims.time, int(std::size_t(dims.channels) * std::size_t(t) / std::size_t(tp)),
          int(std::size_t(dims.channels) * std::size_t(t + 1) / std::size_t(tp))};
}

// ---- Strategies -----------------------------------------------------------------------------

namespace {

int index_of(const Shape& sh, int d, int c, int t) { return (d * sh.cp + c) * sh.tp + t; }

struct Builder {
  const Shape &A, &B;  // sending, receiving stage
  const Dims& dims;
  std::vector<Message> out;

  void add(End from, End to, const Block& block, int phase) {
    if (!block.empty()) out.push_back({from, to, block, phase});
  }
  // Every sender block overlapping `target`, from sender shard `shard % tp`. Only the replicas
  // and members whose rows and time steps meet the target's (block_of's grid) are visited: the
  // others give empty blocks, and visiting all made a hop between stages of dp 65,536 cost
  // dp x dp intersections.
  void from_senders(const Block& target, End to, int shard, int phase) {
    const int rows = dims.rows / A.dp, steps = dims.time / A.cp;
    if (target.empty() || rows == 0 || steps == 0) return;  // every sender block is empty
    const int d_end = std::min(A.dp, (target.r1 + rows - 1) / rows), c_end = std::min(A.cp, (target.t1 + steps - 1) / steps);
    for (int d = std::max(0, target.r0 / rows); d < d_end; ++d)
      for (int c = std::max(0, target.t0 / steps); c < c_end; ++c) {
        const int i = index_of(A, d, c, shard % A.tp);
        add({0, i}, to, target & block_of(A, dims, i), phase);
      }
  }
  // Each receiving TP group all-gathers its channel slices: shard t sends slice t of its
  // block to every other shard of its group.
  void tp_all_gather(int phase) {
    if (B.tp == 1) return;
    for (int d = 0; d < B.dp; ++d)
      for (int c = 0; c < B.cp; ++c)
        for (int t = 0; t < B.tp; ++t) {
          const int i = index_of(B, d, c, t);
          for (int u = 0; u < B.tp; ++u)
            if (u != t) add({1, i}, {1, index_of(B, d, c, u)}, block_of(B, dims, i) & channel_slice(dims, t, B.tp), phase);
        }
  }
};

}  // namespace

std::vector<Message> reshard(const Shape& A, const Shape& B, const Dims& dims, Resharding strategy) {
  Builder b{A, B, dims, {}};
  switch (strategy) {
    case Resharding::all_pairs:  // HetAuto §5.2 strategy 1: straight from the senders
      for (int i = 0; i < B.ranks(); ++i) b.from_senders(block_of(B, dims, i), {1, i}, i % B.tp, 0);
      break;
    case Resharding::send_recv_allgather:  // H2 §5: 1/tp of the channels each, then all-gather
      for (int i = 0; i < B.ranks(); ++i) {
        const int t = i % B.tp;
        b.from_senders(block_of(B, dims, i) & channel_slice(dims, t, B.tp), {1, i}, t, 0);
      }
      b.tp_all_gather(1);
      break;
    case Resharding::gather_send_scatter: {  // HetAuto §5.2 strategy 2: one path
      // Gather on the first sender: every other (replica, member) sends its block, split over
      // its TP shards by channels; the first sender's own (replica, member) it holds already.
      for (int i = A.tp; i < A.ranks(); ++i)
        b.add({0, i}, {0, 0}, block_of(A, dims, i) & channel_slice(dims, i % A.tp, A.tp), 0);
      b.add({0, 0}, {1, 0}, {0, dims.rows, 0, dims.time, 0, dims.channels}, 1);
      for (int i = 1; i < B.ranks(); ++i) b.add({1, 0}, {1, i}, block_of(B, dims, i), 2);
      break;
    }
    case Resharding::inner_dp_rank0: {  // HetAuto §5.2 strategy 3: through replica 0 of both stages
      // (1) Gather: replica d > 0 of the senders gives its channel slice to replica 0's shard.
      for (int i = A.cp * A.tp; i < A.ranks(); ++i)
        b.add({0, i}, {0, i % (A.cp * A.tp)}, block_of(A, dims, i) & channel_slice(dims, i % A.tp, A.tp), 0);
      // (2) P2P between replica 0 of both stages: receiver (0, c', t') gets all rows of its time
      // steps and channel slice from the (0, c, t) holding them.
      for (int j = 0; j < B.cp * B.tp; ++j) {
        Block want = block_of(B, dims, j) & channel_slice(dims, j % B.tp, B.tp);
        want.r0 = 0, want.r1 = dims.rows;
        for (int i = 0; i < A.cp * A.tp; ++i) {
          Block held = block_of(A, dims, i) & channel_slice(dims, i % A.tp, A.tp);
          held.r0 = 0, held.r1 = dims.rows;
          b.add({0, i}, {1, j}, want & held, 1);
        }
      }
      // (3) Scatter along DP, (4) all-gather along TP.
      for (int i = B.cp * B.tp; i < B.ranks(); ++i)
        b.add({1, i % (B.cp * B.tp)}, {1, i}, block_of(B, dims, i) & channel_slice(dims, i % B.tp, B.tp), 2);
      b.tp_all_gather(3);
      break;
    }
  }
  return std::move(b.out);
}

Traffic traffic(const std::vector<Message>& messages, const End& rank) {
  Traffic t;
  for (const auto& m : messages) {
    if (m.from == rank) t.sent += m.block.elements();
    if (m.to == rank) t.received += m.block.elements();
  }
  return t;
}

Resharding strategy(const Pipeline& p, int s) {
  return p.stages[std::size_t(s)].resharding.value_or(Resharding::all_pairs);
}

StageHops hops_of(const Plan& plan, const Topology& topo, int r) {
  const Place& pl = topo.place(r);
  const Pipeline& pipe = plan.pipelines[std::size_t(pl.pipeline)];
  const int s = pl.stage, S = static_cast<int>(pipe.stages.size());
  const int index = r - topo.rank(pl.pipeline, s, 0);
  const Dims dims{pipe.micro_batch_size, plan.model.seq_length, plan.model.hidden_size};
  // The messages from stage `a` to stage `b` in which this rank (on `side`) takes part.
  auto part = [&](int a, int b, Resharding strategy, int side) {
    HopPart h;
    h.me = {side, index};
    const int stage_of_side[2] = {a, b};
    for (const Message& m : reshard(shape_of(pipe.stages[std::size_t(a)]), shape_of(pipe.stages[std::size_t(b)]), dims, strategy)) {
      if (!(m.from == h.me) && !(m.to == h.me)) continue;
      h.messages.push_back(m);
      h.from_rank.push_back(topo.rank(pl.pipeline, stage_of_side[m.from.side], m.from.index));
      h.to_rank.push_back(topo.rank(pl.pipeline, stage_of_side[m.to.side], m.to.index));
    }
    return h;
  };
  StageHops out;
  if (s > 0) {
    out.activations_in = part(s - 1, s, strategy(pipe, s - 1), 1);
    out.gradients_out = part(s, s - 1, strategy(pipe, s - 1), 0);
  }
  if (s + 1 < S) {
    out.activations_out = part(s, s + 1, strategy(pipe, s), 0);
    out.gradients_in = part(s + 1, s, strategy(pipe, s), 1);
  }
  return out;
}

StepTraffic step_traffic(const Plan& plan, const Topology& topo, int r) {
  const StageHops h = hops_of(plan, topo, r);
  const std::size_t m = std::size_t(plan.pipelines[std::size_t(topo.place(r).pipeline)].num_microbatches);
  StepTraffic out;
  for (const HopPart* part : {&h.activations_in, &h.activations_out}) {
    const Traffic t = traffic(part->messages, part->me);
    out.activations.sent += m * t.sent, out.activations.received += m * t.received;
  }
  for (const HopPart* part : {&h.gradients_in, &h.gradients_out}) {
    const Traffic t = traffic(part->messages, part->me);
    out.gradients.sent += m * t.sent, out.gradients.received += m * t.received;
  }
  return out;
}

}  // namespace het::program
