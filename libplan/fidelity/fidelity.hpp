#pragma once
// Holding predictions to measured runs (issue 16): the same run predicted and measured, side by
// side.
//
// Time dilation: `hetexec run-local --time-dilation X` runs every rank's compute and every
// shaped link X times slower; dilate() turns the cluster and profiles into the ones of that run,
// so that predict() predicts it (`hetplan simulate --time-dilation X`).
//
// A measured run is the Chrome trace `hetexec run-local --trace` writes: per rank a track named
// as the simulator names it ("p0 s1 compute" for replica 0 shard 0 of stage 1 of pipeline 0),
// with events F<j>, B<j>, "wait F<j>", "wait B<j>", zero_grad, sync, optimizer, gather, loss,
// and "step" around each step (libexec/runtime/runtime.hpp). compare() reads, per stage, the
// median over the steps after the first (the first warms caches and connections) and sets it
// beside the prediction; of the stage's member with the most compute of its own (its events'
// compute_s: a CP stage's last context member, whose compute the profile times and the others
// wait for), the first member when the trace has no compute. A forward or backward per micro-batch is, per step, the mean of the
// step's micro-batches (a step pays for its slow ones too: the median of all micro-batches
// leaves them out, and on this shared machine it was 5% under what a step of 8 paid), then the
// median over steps.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/diag.hpp"
#include "predict/predict.hpp"
#include "sim/sim.hpp"
#include "spec/cluster.hpp"
#include "spec/profile.hpp"

namespace het::fidelity {

// x >= 1. Devices: peak and memory bandwidth over x; links: bandwidth over x, latency times x,
// then in series with `transport` when given (what each message pays the machine's transport
// under the emulated link: latencies add, the bytes' times add); profiles: every time (forward,
// backward, recompute, optimizer step) times x.
ClusterSpec dilate(ClusterSpec cluster, double x, const std::optional<LinkSpec>& transport = {});
ProfileSpec dilate(ProfileSpec profile, double x);
// A run of `plan` on the profiled machine with emulated links, dilated x times (x >= 1; 1: not
// dilated): the plan's cluster and the profiles dilated, the links in series with the
// profiles' transport (the slowest one given).
void emulated_run(Plan& plan, std::vector<ProfileSpec>& profiles, double x);

// The events of a Chrome trace file (ts and dur in microseconds), with their tracks' names.
// Errors: a file that cannot be read or is not a Chrome trace (file named).
Result<std::vector<sim::TraceEvent>> read_chrome_trace(const std::string& file);

// A stage's times in one step (the measured ones: medians over the steps used).
struct StageTimes {
  double forward_s = 0, backward_s = 0;  // per micro-batch (measured: the step's mean)
  double compute_s = 0;                  // all forwards and backwards of the step
  // Their device's own compute: compute_s less the TP/CP collectives inside it (measured: the
  // events' compute_s, the rank's CPU time as the run stretched it; 0 when the trace has none).
  // Measured over predicted, it is how fast this machine computed during the run against its
  // profile: a host that slows the machine for a while shows here, not as a model error.
  double own_compute_s = 0;
  double wait_s = 0;                     // the rest of the step before the sync: blocked on data, idle
  double sync_s = 0, optimizer_s = 0;    // gradient sync (with ZeRO's gather), optimizer step
  double step_s = 0;                     // the whole step on this stage's rank
};

struct StageRow {
  int pipeline = 0, stage = 0;
  std::string subcluster;
  StageTimes predicted, measured;
};

struct Comparison {
  std::vector<StageRow> stages;
  double predicted_step_s = 0, measured_step_s = 0;  // the iteration; measured: slowest rank's step, median
  int steps_used = 0;                                // steps measured (the first one left out)
  double ratio() const { return predicted_step_s / measured_step_s; }  // predicted ÷ measured
  // Σ measured ÷ Σ predicted own compute over the stages (0: the trace has no compute): > 1, the
  // machine computed slower during the run than when it was profiled.
  double compute_ratio() const;
};

// Errors: a trace without the plan's stages or without two complete steps.
Result<Comparison> compare(const predict::Outcome& predicted, const std::vector<sim::TraceEvent>& measured);

// A table per stage (predicted / measured / error of each column) and the step's line.
std::string table(const Comparison& c);
nlohmann::ordered_json to_json(const Comparison& c);

// One Chrome trace holding both timelines as two processes, "predicted" and "measured", with
// the same track names: the prediction's iteration, and the measured step whose slowest rank
// took the median time, both starting at 0.
std::string side_by_side_trace(const std::vector<sim::TraceEvent>& predicted, const std::vector<sim::TraceEvent>& measured);

}  // namespace het::fidelity
