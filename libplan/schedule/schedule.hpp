#pragma once
// Pipeline schedules (DESIGN.md §7): for every stage, how many forwards it runs before its
// first backward (the warm-up count N_s), and from that the full ordered list of its
// operations: N_s forwards, then alternately one backward and one forward, then the
// remaining backwards. This module is the single source of operation order: the simulator
// times these lists and the executor runs them.
//
// Warm-up rules, for S stages (s = 0 .. S-1) and m micro-batches:
//   gpipe         N_s = m
//   1f1b          N_s = S - s                                  (PipeDream-Flush / Megatron)
//   eager-1f1b    N_s = 2(S - s) - 1                           (Zhuang et al., cited in HAPT §2)
//   h-1f1b        N_{S-1} = 1, N_s = N_{s+1} + δ_s             (HAPT §4.1, eq. 1-2)
//                 δ_s = 1 if c_s ≤ ε·t_max, 2 if c_s ≤ t_max/2, 3 if c_s ≤ t_max, and
//                 ⌈1 + 2c_s/t_max⌉ beyond (eq. 11, where full overlap is no longer possible);
//                 c_s = transfer time between stages s and s+1, t_max = max_s (f_s + b_s)
//   virtual-1f1b  1f1b plus one per cross-subcluster boundary at or after the stage
//                 (each boundary is a virtual stage: D2H, network, H2D; HetAuto §5.1)
// Every count is then capped by the stage's memory limit (micro-batches whose activations
// it can hold) and by m, and is at least 1; and no stage gets more than the stage before
// it (N_s >= N_{s+1}), without which the schedule deadlocks.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace het::schedule {

enum class OpKind : std::uint8_t { forward, backward };

struct Op {
  OpKind kind;
  int microbatch;
  friend bool operator==(const Op&, const Op&) = default;
};

struct WarmupInput {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int num_microbatches = 1;
  std::vector<double> stage_s;            // f + b per micro-batch, one per stage (h-1f1b)
  std::vector<double> transfer_s;         // c_s between stage s and s+1, S-1 of them (h-1f1b)
  std::vector<bool> crosses_subcluster;   // boundary s -> s+1 crosses subclusters, S-1 (virtual-1f1b)
  std::vector<int> memory_limit;          // per stage, micro-batches in flight it can hold; empty: no limit
  // h-1f1b: transfers up to ε·t_max count as free (δ = 1). HAPT leaves ε "small"; a
  // boundary treated so stays exposed, costing up to 2c/N_s per micro-batch, so the default
  // keeps that under 1% and spends one more warm-up micro-batch of memory otherwise.
  double epsilon = 0.01;
  int num_stages() const { return static_cast<int>(stage_s.size()); }
};

// What a stage's memory holds in flight, for WarmupInput::memory_limit: memory is linear in the
// micro-batches in flight, `one` with one and `per` more for each after it, within `limit`. At
// least 1 (a stage runs one micro-batch whatever it holds) and at most `most`, which is also
// the answer when more add nothing. predict and the search's estimate both cap with this.
int held_in_flight(double limit, double one, double per, int most);

// Warm-up count per stage. Preconditions: stage_s non-empty; the other vectors sized as
// documented (transfer_s/crosses_subcluster may be empty when the kind does not use them).
std::vector<int> warmup_counts(const WarmupInput& in);

// The ordered operations of one stage: `warmup` forwards, then B/F alternating, then the
// remaining backwards. Micro-batches run in order 0..m-1 in both directions.
std::vector<Op> stage_ops(int warmup, int num_microbatches);

// "F3" / "B3" for traces and messages.
std::string to_string(const Op& op);

}  // namespace het::schedule
