#include <catch2/catch.hpp>

#include <random>

#include "schedule/schedule.hpp"

using namespace het;
using namespace het::schedule;

namespace {
WarmupInput warmup_input(ScheduleKind kind, int S, int m) {
  WarmupInput in;
  in.kind = kind;
  in.num_microbatches = m;
  in.stage_s.assign(S, 1.0);
  in.transfer_s.assign(S - 1, 0.0);
  in.crosses_subcluster.assign(S - 1, false);
  return in;
}
}  // namespace

TEST_CASE("warm-up counts of the fixed schedules") {
  CHECK(warmup_counts(warmup_input(ScheduleKind::one_f_one_b, 4, 16)) == std::vector<int>{4, 3, 2, 1});
  CHECK(warmup_counts(warmup_input(ScheduleKind::eager_1f1b, 4, 16)) == std::vector<int>{7, 5, 3, 1});
  CHECK(warmup_counts(warmup_input(ScheduleKind::gpipe, 3, 16)) == std::vector<int>{16, 16, 16});
  // Capped by the micro-batch count.
  CHECK(warmup_counts(warmup_input(ScheduleKind::eager_1f1b, 4, 4)) == std::vector<int>{4, 4, 3, 1});
  CHECK(warmup_counts(warmup_input(ScheduleKind::one_f_one_b, 1, 8)) == std::vector<int>{1});
}

TEST_CASE("h-1f1b adds 1, 2 or 3 per boundary by c/t_max (HAPT §4.1 eq. 2)") {
  auto in = warmup_input(ScheduleKind::h_1f1b, 5, 64);
  in.stage_s = {1.0, 0.8, 1.0, 0.9, 0.5};  // t_max = 1
  in.transfer_s = {0.01, 0.4, 0.7, 1.0};   // δ = 1, 2, 3, 3
  in.epsilon = 0.05;
  CHECK(warmup_counts(in) == std::vector<int>{10, 9, 7, 4, 1});
  in.transfer_s = {0.0, 0.5, 0.051, 2.0};  // δ = 1, 2, 2, ⌈1+4⌉ = 5
  CHECK(warmup_counts(in) == std::vector<int>{11, 10, 8, 6, 1});
}

TEST_CASE("virtual-1f1b adds one warm-up per cross-subcluster boundary after the stage (HetAuto §5.1)") {
  auto in = warmup_input(ScheduleKind::virtual_1f1b, 4, 32);
  in.crosses_subcluster = {false, true, false};
  CHECK(warmup_counts(in) == std::vector<int>{5, 4, 2, 1});
  in.crosses_subcluster = {true, true, true};
  CHECK(warmup_counts(in) == std::vector<int>{7, 5, 3, 1});
}

TEST_CASE("memory caps warm-ups, and a capped stage caps the stages after it") {
  auto in = warmup_input(ScheduleKind::eager_1f1b, 4, 32);
  in.memory_limit = {8, 2, 8, 8};
  CHECK(warmup_counts(in) == std::vector<int>{7, 2, 2, 1});
}

TEST_CASE("stage operations: warm-up forwards, then one backward one forward, then drain") {
  auto ops = stage_ops(3, 5);
  std::string text;
  for (const auto& op : ops) text += to_string(op) + " ";
  CHECK(text == "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4 ");
  CHECK(stage_ops(5, 3).size() == 6);  // warm-up beyond m is capped
}

TEST_CASE("property: every stage runs each micro-batch's F once, before its B once") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    int m = std::uniform_int_distribution<int>(1, 40)(rng);
    int w = std::uniform_int_distribution<int>(0, 50)(rng);
    auto ops = stage_ops(w, m);
    REQUIRE(ops.size() == 2 * static_cast<std::size_t>(m));
    std::vector<int> f_at(m, -1), b_at(m, -1);
    int in_flight = 0, max_in_flight = 0;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      auto& slot = ops[k].kind == OpKind::forward ? f_at : b_at;
      REQUIRE(slot[ops[k].microbatch] == -1);
      slot[ops[k].microbatch] = static_cast<int>(k);
      in_flight += ops[k].kind == OpKind::forward ? 1 : -1;
      max_in_flight = std::max(max_in_flight, in_flight);
    }
    for (int i = 0; i < m; ++i) REQUIRE(f_at[i] < b_at[i]);
    CHECK(max_in_flight == std::clamp(w, 1, m));
  }
}
