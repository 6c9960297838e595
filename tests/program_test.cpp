// The rank program's resharding messages, checked element by element: every strategy gives
// every receiving rank its whole block exactly once, sends only what a rank holds, and moves
// the bytes between stages that its seed says it moves.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "program/program.hpp"

using namespace het;
using program::Block;
using program::Dims;
using program::End;
using program::Shape;

namespace {

// Per element of the tensor, how many times an End holds it.
struct Holdings {
  Dims dims;
  std::map<std::pair<int, int>, std::vector<int>> count;  // (side, index) -> [rows·time·channels]
  std::vector<int>& of(const End& e) {
    auto& v = count[{e.side, e.index}];
    if (v.empty()) v.assign(std::size_t(dims.rows) * dims.time * dims.channels, 0);
    return v;
  }
  template <class F>
  void each(const Block& b, F&& f) {
    for (int r = b.r0; r < b.r1; ++r)
      for (int t = b.t0; t < b.t1; ++t)
        for (int c = b.c0; c < b.c1; ++c) f((std::size_t(r) * dims.time + t) * dims.channels + c);
  }
};

// Runs the messages abstractly; returns the elements that cross from one stage to the other.
std::size_t check_program(const Shape& A, const Shape& B, const Dims& dims, Resharding r) {
  const auto msgs = program::reshard(A, B, dims, r);
  Holdings held{dims, {}};
  for (int i = 0; i < A.ranks(); ++i) held.each(program::block_of(A, dims, i), [&](std::size_t e) { held.of({0, i})[e] = 1; });
  Holdings received{dims, {}};
  std::size_t crossing = 0;
  int phase = -1;
  std::vector<std::pair<End, Block>> pending;  // received in the current phase: held from the next
  for (const auto& m : msgs) {
    REQUIRE(m.phase >= phase);
    if (m.phase != phase) {
      for (auto& [e, b] : pending) held.each(b, [&, e = e](std::size_t x) { held.of(e)[x] = 1; });
      pending.clear();
      phase = m.phase;
    }
    REQUIRE(!m.block.empty());
    bool all_held = true;
    held.each(m.block, [&](std::size_t x) { all_held &= held.of(m.from)[x] > 0; });
    INFO("phase " << m.phase << " from " << m.from.side << ":" << m.from.index << " to " << m.to.side << ":" << m.to.index);
    REQUIRE(all_held);  // a rank sends only what it held before the phase
    received.each(m.block, [&](std::size_t x) { ++received.of(m.to)[x]; });
    pending.push_back({m.to, m.block});
    if (m.from.side != m.to.side) crossing += m.block.elements();
  }
  for (int j = 0; j < B.ranks(); ++j) {  // each element of every receiver's block exactly once
    INFO("receiver " << j);
    bool once = true;
    held.each(program::block_of(B, dims, j), [&](std::size_t x) { once &= received.of({1, j})[x] == 1; });
    REQUIRE(once);
  }
  return crossing;
}

}  // namespace

TEST_CASE("every resharding strategy gives every receiving rank its whole block once, from what senders hold") {
  const Dims dims{12, 12, 12};  // divisible by every degree below
  const std::vector<int> degrees = {1, 2, 3, 4};
  int cases = 0;
  for (int dpa : degrees)
    for (int cpa : {1, 2})
      for (int tpa : degrees)
        for (int dpb : degrees)
          for (int cpb : {1, 3})
            for (int tpb : degrees) {
              const Shape A{dpa, cpa, tpa}, B{dpb, cpb, tpb};
              const std::size_t M = std::size_t(dims.rows) * dims.time * dims.channels;
              INFO("(" << dpa << "," << cpa << "," << tpa << ") -> (" << dpb << "," << cpb << "," << tpb << ")");
              // all-pairs: every receiving TP shard gets its block from the senders.
              CHECK(check_program(A, B, dims, Resharding::all_pairs) == M * std::size_t(tpb));
              // The others move the tensor across once.
              CHECK(check_program(A, B, dims, Resharding::send_recv_allgather) == M);
              CHECK(check_program(A, B, dims, Resharding::inner_dp_rank0) == M);
              CHECK(check_program(A, B, dims, Resharding::gather_send_scatter) == M);
              ++cases;
            }
  CHECK(cases == 4 * 2 * 4 * 4 * 2 * 4);
}

TEST_CASE("gather-send-scatter crosses on one path, inner-dp-rank0 on the cp·tp paths of replica 0") {
  const Dims dims{8, 8, 8};
  const Shape A{4, 1, 2}, B{2, 2, 2};
  auto paths = [&](Resharding r) {
    std::set<std::pair<int, int>> p;
    for (const auto& m : program::reshard(A, B, dims, r))
      if (m.from.side != m.to.side) p.insert({m.from.index, m.to.index});
    return p;
  };
  CHECK(paths(Resharding::gather_send_scatter) == std::set<std::pair<int, int>>{{0, 0}});
  for (auto [from, to] : paths(Resharding::inner_dp_rank0)) {
    CHECK(from < A.cp * A.tp);  // senders of replica 0
    CHECK(to < B.cp * B.tp);    // receivers of replica 0
  }
  CHECK(paths(Resharding::inner_dp_rank0).size() == 4);  // (0,0,t) -> (0,c',t') with matching channels
}

TEST_CASE("a rank's traffic per step is its messages times the micro-batches") {
  Plan plan;
  plan.model.seq_length = 8, plan.model.hidden_size = 4, plan.model.num_layers = 2;
  Pipeline p;
  p.micro_batch_size = 4, p.num_microbatches = 3;
  Stage a, b;
  a.first = 0, a.last = 1, a.dp = 2, a.devices = {{0, 0}, {0, 1}};
  b.first = 2, b.last = 3, b.tp = 2, b.devices = {{0, 2}, {0, 3}};
  a.resharding = Resharding::all_pairs;
  p.stages = {a, b};
  plan.pipelines = {p};
  const program::Topology topo(plan);
  REQUIRE(topo.ranks() == 4);
  CHECK(topo.rank(0, 1, 0, 0, 1) == 3);
  CHECK(topo.tp_group(2) == std::vector<int>{2, 3});
  // Stage 0 replica d holds 2 of the 4 sequences [2, 8, 4] = 64 elements and sends them to
  // both TP shards of stage 1; gradients come back from one shard each (t % tp_a = 0).
  const auto t0 = program::step_traffic(plan, topo, 0);
  CHECK(t0.activations.sent == 3 * 2 * 64);
  CHECK(t0.activations.received == 0);
  CHECK(t0.gradients.received == 3 * 64);
  const auto t3 = program::step_traffic(plan, topo, 3);
  CHECK(t3.activations.received == 3 * 128);
  CHECK(t3.gradients.sent == 0);  // shard 1 of stage 1 sends no gradients (shard 0 does)
  CHECK(program::step_traffic(plan, topo, 2).gradients.sent == 3 * 128);
}

TEST_CASE("all-pairs resharding lists exactly the overlapping sender blocks of a scan over all senders, in its order") {
  // from_senders visits only the replicas and members whose rows and time steps meet the
  // receiver's (a hop between stages of dp 65,536 was dp x dp intersections); the messages
  // must be those of the scan, in the same order.
  for (const Dims& dims : {Dims{8, 12, 6}, Dims{16, 8, 4}, Dims{4, 6, 8}, Dims{3, 5, 7}})
    for (const Shape& A : {Shape{1, 1, 1}, Shape{2, 1, 2}, Shape{4, 2, 1}, Shape{8, 3, 2}, Shape{16, 1, 1}, Shape{3, 5, 1}})
      for (const Shape& B : {Shape{1, 1, 1}, Shape{4, 1, 2}, Shape{2, 2, 2}, Shape{8, 4, 1}, Shape{16, 2, 1}, Shape{1, 6, 3}})
        for (Resharding r : {Resharding::all_pairs, Resharding::send_recv_allgather}) {
          INFO("A " << A.dp << "/" << A.cp << "/" << A.tp << ", B " << B.dp << "/" << B.cp << "/" << B.tp << ", dims " << dims.rows
                    << "x" << dims.time << "x" << dims.channels << ", " << to_string(r));
          std::vector<program::Message> scan;
          for (int i = 0; i < B.ranks(); ++i) {
            const int t = i % B.tp;
            Block want = program::block_of(B, dims, i);
            if (r == Resharding::send_recv_allgather) want = want & program::channel_slice(dims, t, B.tp);
            for (int d = 0; d < A.dp; ++d)
              for (int c = 0; c < A.cp; ++c) {
                const int from = (d * A.cp + c) * A.tp + t % A.tp;
                if (Block b = want & program::block_of(A, dims, from); !b.empty()) scan.push_back({{0, from}, {1, i}, b, 0});
              }
          }
          auto msgs = program::reshard(A, B, dims, r);
          std::vector<program::Message> first_phase;
          for (const auto& m : msgs)
            if (m.phase == 0) first_phase.push_back(m);
          REQUIRE(first_phase.size() == scan.size());
          for (std::size_t k = 0; k < scan.size(); ++k) {
            CHECK(first_phase[k].from == scan[k].from);
            CHECK(first_phase[k].to == scan[k].to);
            CHECK(first_phase[k].block == scan[k].block);
          }
        }
}
