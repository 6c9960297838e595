#pragma once
// The pipeline simulator (DESIGN.md §7): HAPT §4.2.1's DAG. For every micro-batch i and
// stage s there are four nodes: F(i,s), B(i,s), C^F(i,s) (activations s -> s+1) and
// C^B(i,s) (gradients s+1 -> s). Edges: compute order on a stage (the schedule module's
// operation list), transfer order on each link direction (full duplex, one transfer at a
// time per direction, in issue order), and data dependencies (F(i,s) -> C^F(i,s) ->
// F(i,s+1); B(i,s+1) -> C^B(i,s) -> B(i,s)). Start times are longest paths, computed in
// one topological sweep: O(stages × micro-batches) per pipeline.
//
// After the pipelines: the gradient sync, group after group in the order given (a stage in
// several groups syncs them one after the other, as the runtime reduces its buckets; a group
// starts when all its members have ended their previous groups), the first overlapped with
// the last backward when allowed, then each stage's optimizer step. The iteration ends when
// the last optimizer step does.
//
// The simulator knows nothing about models or devices: the cost model fills in the times.
#include <string>
#include <utility>
#include <vector>

#include "diag/diag.hpp"

namespace het::sim {

struct StageCosts {
  double forward_s = 0;         // per micro-batch, TP collectives included
  double backward_s = 0;        // per micro-batch, recomputation and TP collectives included
  double send_forward_s = 0;    // activations to the next stage, per micro-batch (last stage: unused)
  double send_backward_s = 0;   // gradients from the next stage back to this one (last stage: unused)
  double optimizer_s = 0;       // optimizer step after the gradient sync
  std::string name;             // for traces, e.g. "p0 s1 a100"
  bool cross_to_next = false;   // the link to the next stage leaves the subcluster (for overlap)
};

struct PipelineInput {
  int num_microbatches = 1;
  std::vector<StageCosts> stages;
  std::vector<int> warmup;  // per stage; see schedule::warmup_counts
  // Micro-batches of different costs (buckets of a sequence-length distribution): micro-batch
  // i's forward, backward and sends on stage s are by_kind[kind[i]][s]'s (the optimizer step,
  // name and cross flag stay stages[s]'s). Empty: every micro-batch costs stages[s].
  std::vector<int> kind;                         // per micro-batch
  std::vector<std::vector<StageCosts>> by_kind;  // [kind][stage]
};

// The costs of micro-batch i on stage s (by_kind when the pipeline has kinds).
const StageCosts& microbatch_costs(const PipelineInput& p, int s, int i);

// Stages whose gradients are reduced together; time_s is the collective's duration.
struct SyncGroup {
  std::vector<std::pair<int, int>> members;  // (pipeline, stage)
  double time_s = 0;
};

struct SimInput {
  std::vector<PipelineInput> pipelines;
  std::vector<SyncGroup> sync_groups;  // a stage in no group needs no sync
  bool overlap_sync = false;           // sync may start with the last backward (bucketed all-reduce)
  bool trace = false;                  // record TraceEvents
};

struct TraceEvent {
  std::string track;  // "p0 s1 compute", "p0 s1->s2 send", ...
  std::string name;   // "F3", "B3", "C^F 3", "sync", "optimizer"
  double start_s = 0, duration_s = 0;
  // A measured compute event (hetexec --trace: F<j>, B<j>, optimizer, zero_grad): the device's
  // own compute inside it, the collectives it waited on left out (the rank's CPU time stretched
  // as runtime/pace.hpp stretches it); < 0: not known (a predicted event, a wait).
  double compute_s = -1;
};

struct StageReport {
  double compute_s = 0;        // Σ forward + backward time
  double send_busy_s = 0;      // time its outgoing links (both directions) carry data
  double last_backward_end_s = 0;
  double sync_end_s = 0;       // when its gradient sync finished
  double finish_s = 0;         // after its optimizer step
  double idle_s = 0;           // pipeline makespan minus compute
  int max_in_flight = 0;       // most micro-batches whose activations it held at once
};

struct PipelineReport {
  double makespan_s = 0;  // last backward of any stage
  std::vector<StageReport> stages;
};

struct SimResult {
  double iteration_s = 0;
  double bubble_fraction = 0;  // 1 - Σ compute / Σ (stages × makespan), over all pipelines
  double exposed_sync_s = 0;   // iteration time added by gradient sync beyond the makespan
  // Share of cross-subcluster transfer time during which the stage waiting for the data
  // was computing something else (1 when there are no such transfers).
  double cross_overlap = 1;
  std::vector<PipelineReport> pipelines;
  std::vector<TraceEvent> trace;
};

// Errors: a schedule that deadlocks (named stage and micro-batch), mismatched sizes.
Result<SimResult> simulate(const SimInput& input);

// One pipeline's DAG alone, as simulate() runs each of its pipelines (no trace, no sync): the
// search's estimate of a split asks for its makespan under the plan's warm-ups (issue 20).
Result<PipelineReport> simulate_pipeline(const PipelineInput& pipeline);

// Chrome trace JSON (open in Perfetto or chrome://tracing): one track per stage and link.
std::string chrome_trace(const std::vector<TraceEvent>& events);
// Several timelines in one trace: each a process of that name, its tracks its threads.
struct TraceProcess {
  std::string name;
  std::vector<TraceEvent> events;
};
std::string chrome_trace(const std::vector<TraceProcess>& processes);

}  // namespace het::sim
