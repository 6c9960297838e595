#pragma once
// Predicting a plan (DESIGN.md §6-§7): costs every stage with the cost model, derives the
// warm-up counts from the schedule module, runs the simulator, and returns the plan with
// its derived fields filled in (warm-ups, per-stage and overall predictions) plus the
// detail behind them.
//
// Stage costs: compute per unit (profile or analytic) summed over the stage's units;
// recomputation added to the backward; TP collectives (2 all-reduces of the activation per
// layer forward and 2 backward, over the TP group's link) and CP exchanges (all-gather of
// K/V forward, reduce-scatter backward) added when the compute came from the analytic
// model. Transfers between stages: the activation of one micro-batch (mbs·s·h·dtype) over
// the link class of the two stages' devices, resharded when their (dp, cp, tp) differ by
// the cheapest strategy (or the one asked for): all-pairs (HetAuto §5.2 strategy 1),
// gather-send-scatter (strategy 2), through inner-DP rank 0 (strategy 3), or send/recv +
// all-gather (H2 §5). Cross-subcluster hops pay D2H + network + H2D (HetAuto §5.1).
// Gradient sync: stages holding the same units (across a stage's replicas and across
// pipelines) form a sync group; ring all-reduce of each member's gradient shard over the
// slowest link class the group spans.
#include <optional>
#include <string>
#include <vector>

#include "cost/compute.hpp"
#include "cost/memory.hpp"
#include "plan/plan.hpp"
#include "sim/sim.hpp"

namespace het::predict {

struct Options {
  std::optional<ScheduleKind> schedule;  // replaces the plan's when set
  // Between stages: this one for every hop when set, else the plan's where it names one, else
  // the cheapest (predict::hop).
  std::optional<Resharding> resharding;
  double host_bandwidth = 24e9;  // D2H and H2D copies of cross-subcluster hops (PCIe 4.0 x16)
  // Gradient sync overlapped with the last backward (bucketed, as Megatron does). Off: the
  // runtime syncs after the step's last backward (libexec/runtime), and the prediction says
  // what the runtime does; on, a what-if for a runtime that overlaps.
  bool overlap_sync = false;
  double epsilon = 0.01;         // h-1f1b's ε
  bool trace = false;
  // The fraction of a device's usable memory (memory less its reserve) a plan must leave free
  // (issue 17: the model's own error and the allocator's fragmentation). `hetplan search`
  // keeps 5% by default (--memory-headroom); simulate and validate ask only that a plan fit.
  double memory_headroom = 0;
  // Prediction::per_stage, the simulator's detail per stage as JSON, is filled: a plan written
  // or shown carries it. The search's own rankings (mcts's entrants, hexiscale's parts) read
  // only the times and memory and leave it out (issue 20: building it was 6% of exp3's CPU).
  bool per_stage = true;
};

struct StageDetail {
  double forward_s = 0, backward_s = 0;  // per micro-batch, communication inside the stage included
  double collectives_s = 0;              // per micro-batch: the TP/CP collectives in forward_s + backward_s
  double send_forward_s = 0;             // activations to the next stage, per micro-batch
  double send_backward_s = 0;            // gradients back from the next stage
  double send_bytes = 0;                 // bytes per micro-batch and direction to the next stage
  bool crosses_subcluster = false;       // the hop to the next stage leaves the subcluster
  double sync_s = 0;                     // its sync group's all-reduce
  double optimizer_s = 0;
  cost::StageMemory memory;
  double capacity = 0;                   // usable device memory: its memory less its reserve
  double limit = 0;                      // what the stage may use: capacity × (1 − memory_headroom)
  cost::Source source = cost::Source::analytic;  // least exact source among its units
  int warmup = 1;
};

struct Outcome {
  Plan plan;  // derived fields filled in
  sim::SimResult sim;
  std::vector<std::vector<StageDetail>> stages;  // [pipeline][stage]
  double load_balance_eta = 0;
  std::vector<std::string> notes;                // e.g. stages that do not fit, profiles not used
  // Every stage's peak memory within its devices' capacity.
  bool fits_memory() const {
    for (const auto& p : stages)
      for (const auto& d : p)
        if (d.memory.total() > d.limit) return false;
    return true;
  }
};

// Precondition: validate_plan(plan) is empty. Errors: a schedule that deadlocks.
Result<Outcome> predict(const Plan& plan, const cost::ComputeModel& compute, const Options& options);

}  // namespace het::predict
