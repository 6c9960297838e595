#pragma once
// `hetexec run-local`: every rank of a plan as its own process on this machine (the same
// worker a node agent spawns), talking over loopback TCP. Rank 0's per-step reports are
// relayed; when any rank fails, the others are stopped and the failure is named. SIGINT or
// SIGTERM to the launcher (Ctrl-C) stops every rank and ends the run as interrupted; a worker
// whose launcher dies is stopped by the kernel (the worker asks for PR_SET_PDEATHSIG). A rank
// that hangs (stopped, stuck) is found by the watchdog and named, and the run stops.
#include <functional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "launch/worker_job.hpp"

namespace het::launch {

struct LocalJob {
  std::string executable;  // the hetexec binary (its `worker` command)
  // What every worker is told (launch/worker_job.hpp); run_local() fills in the rendezvous and
  // the progress directory (a fresh directory of its own) and writes it there as job.json.
  WorkerJob worker;
  int world = 1;
  // The CUDA device of each rank (`--device N` to its worker); empty: none given.
  std::vector<int> devices;
  // The watchdog (progress/progress.hpp): every worker publishes its progress, and when no rank
  // has moved for this long the run stops and the hung rank is named. 0: no watchdog.
  double hang_bound_s = 0;
};

// The GPUs of `world` ranks on a machine with `gpus` of them: rank r on GPU r mod gpus, so
// ranks share a GPU only when there are fewer GPUs than ranks (two stages of a pipeline on one
// GPU then link through the host, since NCCL refuses two ranks on one GPU).
std::vector<int> spread_over_gpus(int world, int gpus);

struct LocalResult {
  std::vector<std::string> lines;  // rank 0's stdout lines (JSON per step)
  int interrupted_by = 0;          // the signal (SIGINT, SIGTERM) that stopped the run; 0 if none
};

// Runs the job; `on_line` sees each of rank 0's lines as it arrives.
Result<LocalResult> run_local(const LocalJob& job, const std::function<void(const std::string&)>& on_line);

}  // namespace het::launch
