#pragma once
// One rank of a plan (DESIGN.md §9): the rank program of libplan/program — the schedule
// module's operation order (the one the simulator times), the messages between stages by the
// plan's resharding strategy (the ones the planner costs), the TP and CP collectives — run
// over the transport.
//
// Ranks and their blocks: program/program.hpp. After the last backward: every parameter's
// gradient is summed over the ranks that hold the same slice of it (runtime/sync_plan.hpp says
// which), one bucket per group of ranks reduced by one collective of Options::fabric, in the
// order the planner costs them (runtime/buckets.hpp, predict::sync_buckets); then AdamW. With
// ZeRO (the model's training.zero_stage >= 1) that sum is a reduce-scatter: each holder keeps the
// AdamW moments of its own 1/n of the bucket, updates it, and the updated values are
// all-gathered (ZeRO-1; stage 2 runs the same way on the CPU backend, stage 3 is refused). The
// loss of each step (mean over the global batch's tokens) is gathered on rank 0.
#include <cstdint>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "checkpoint/checkpoint.hpp"
#include "collective/collective.hpp"
#include "data/data.hpp"
#include "diag/diag.hpp"
#include "model/params.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"
#include "progress/progress.hpp"
#include "runtime/memory.hpp"
#include "sim/sim.hpp"
#include "transport/tcp.hpp"

namespace het::runtime {

// What a rank's transport carries, by kind; Peers::count(tag_of(kind)) reads its bytes.
enum class Traffic { activations, gradients, tensor_parallel, gradient_sync, loss, context };
std::uint32_t tag_of(Traffic kind);

// The plan with the derived fields the runtime follows — warm-up counts and resharding
// strategies — filled in by predict() (analytic costs) where the plan lacks them, as
// `hetplan simulate` would.
Plan with_derived_fields(const Plan& plan);

// Empty when this runtime can run the plan; else why not (sublayer units, ZeRO-3, ...).
std::string unsupported(const Plan& plan);

struct Options {
  int steps = 10;
  std::uint64_t seed = 1;
  model::AdamW optimizer;
  // Heterogeneity on one machine: shape every connection to the link class the plan's
  // cluster gives the two ranks (intra-node, inter-node, between subclusters), and slow a
  // rank's compute by (fastest device peak / its device peak).
  bool emulate_links = false;
  bool emulate_devices = false;
  // A fixed slowdown of this rank's compute on top (an agent's --emulate-slowdown), >= 1.
  double slowdown = 1;
  // Time dilation (run-local --time-dilation), >= 1: every rank's compute and every shaped link
  // X times slower (bandwidth / X, latency × X), so that many ranks share few cores without
  // contending; `hetplan simulate --time-dilation X` predicts the same run. Compute is stretched
  // by sleeping (runtime/pace.hpp).
  double time_dilation = 1;
  // The backend computes on the calling thread only (the CPU backend with one thread): compute
  // is then measured in the thread's CPU time when it is stretched (pace.hpp).
  bool compute_on_this_thread = false;
  // When set, every compute and communication step of this rank is recorded here (seconds on
  // the machine's monotonic clock, shared by all processes), with the simulator's event names
  // (F<j>, B<j>, sync, optimizer, gather) and the runtime's own: "wait F<j>" / "wait B<j>"
  // (blocked receiving a micro-batch's activations / gradients), zero_grad, loss (the loss
  // gathered on rank 0 and the sends flushed), "step" (the whole step, around the others) and,
  // inside F<j> and B<j>, each TP or CP collective ("tp all-reduce", "cp all-gather",
  // "cp reduce-scatter": from the end of the compute before it to its data's arrival).
  std::vector<sim::TraceEvent>* trace = nullptr;
  // The groups of the gradient sync, of tensor parallelism and of the hops between stages on
  // the device (NCCL or TCP, collective.hpp); null: all on TCP over `peers`. Every rank asks for
  // its groups in one global order: its TP group, the hops' NCCL groups (the activations', then
  // the gradients', each boundary in pipeline order), the sync's buckets.
  collective::Fabric* fabric = nullptr;
  // When set, the rank's peak memory over the run (memory.hpp) is measured and, after the last
  // step, gathered on rank 0: there it holds every rank's peak by rank, elsewhere the rank's own
  // (one entry). Every rank of a job must set it or none (the gather is a message to rank 0).
  std::vector<MemoryPeak>* memory = nullptr;
  // When set, and the stage's backend is a device's: what the stage moved between host and
  // device memory and how often it waited for the device over the run (backend::DeviceCounters),
  // and the bytes its hops moved device to device (NCCL, bf16), for the run's `steps`.
  struct DeviceReport {
    backend::DeviceCounters counters;
    std::uint64_t activations_sent = 0, activations_received = 0, gradients_sent = 0, gradients_received = 0;
    int steps = 0;
  };
  DeviceReport* device = nullptr;
  // When set, the rank publishes where it is (step, operation, computing or waiting for whom)
  // before every operation, for its supervisor's watchdog (progress/progress.hpp).
  progress::Reporter* progress = nullptr;
  // Checkpoints (checkpoint/checkpoint.hpp, runtime/checkpoints.hpp): when `dir` is set, after
  // every `every` steps and after the last one, every rank writes the part of the parameters and
  // AdamW moments it owns under `dir`; rank 0, once every rank has reported, writes the manifest
  // (recording `about` too: seed, optimizer, data, ...) and keeps the newest `keep` (0: all).
  struct Checkpointing {
    std::string dir;
    int every = 0;
    int keep = 0;
    nlohmann::json about = nlohmann::json::object();
    // A test's fault: this rank dies (SIGKILL) halfway through writing the checkpoint of this
    // step (the one written after step - 1).
    std::optional<int> die_while_saving;
  } checkpointing;
  // Resume: the parameters and AdamW moments from this checkpoint, then the steps from its
  // step to `steps` (steps count from 0 over the whole training, resumed or not).
  const checkpoint::Checkpoint* resume = nullptr;
  // Elastic jobs (submit/elastic.hpp), plans without ZeRO: when a peer is lost, this rank
  // writes everything it holds at the step it has completed into rescue.dir, as held on
  // rescue.holder ("a100/0:1"; checkpoint::write_rescue). rescue.from: a failed job's
  // survivors' state this rank found whole (Checkpoint::open_rescue), or null. Ranks with a
  // holder agree before loading: the rescue is loaded only when every rank found it at the same
  // step, newer than `resume`; then each counts the bytes it read by route (route_between) and
  // rank 0 sums them into *switched. rescue.taken (out): what was loaded (from, resume, or null).
  struct Rescue {
    std::string dir, holder;
    const checkpoint::Checkpoint* from = nullptr;
    const checkpoint::Checkpoint** taken = nullptr;
  } rescue;
  std::array<double, 4>* switched = nullptr;
};

struct StepReport {
  int step = 0;
  double loss = 0;     // mean token loss of the global batch (rank 0 only)
  double seconds = 0;  // wall time of the step on this rank
  std::size_t optimizer_state = 0;  // AdamW moments this rank holds (elements)
  // Rank 0, after a step that wrote a checkpoint: where it is, its size and the time from the
  // step's end until it was complete (this rank's write, then waiting for every other rank's).
  std::string checkpoint;
  std::uint64_t checkpoint_bytes = 0;
  double checkpoint_s = 0;
};

// The bytes of each kind this rank's transport moved (sent, received), and for the traffic
// between stages the bytes its rank program says it moves in `steps` steps (4-byte floats):
// {"measured": {"activations": {"sent", "received"}, ...}, "program": {"activations": ..., "gradients": ...}}.
// With a device report, also {"device": {"to_device_bytes", "to_host_bytes", "syncs", "compute_syncs",
// "compute_syncs_other", "activations": {"sent", "received"}, "gradients": ..., "steps"}}.
nlohmann::json traffic_report(const Plan& plan, const transport::Peers& peers, int steps,
                              const Options::DeviceReport* device = nullptr);

// Runs `options.steps` steps as `peers.rank()` on `backend`; calls on_step after each (rank
// 0's reports carry the loss). Errors name the rank and what failed (a peer that died, a
// corrupt message).
Result<std::vector<StepReport>> run_rank(const Plan& plan, transport::Peers& peers, backend::Backend& backend,
                                         const data::Batches& batches, const Options& options,
                                         const std::function<void(const StepReport&)>& on_step);

}  // namespace het::runtime
