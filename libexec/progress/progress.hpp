#pragma once
// Progress of a job's ranks, and the watchdog that calls a rank hung (issue 18).
//
// Every worker publishes where it is — step, operation, and whether it computes or waits, and
// for which rank — in a small file of its own, `progress.<rank>` in a directory its supervisor
// gives it (run-local's rendezvous directory, the agent's job directory), which it keeps mapped:
// publishing is a few stores to shared memory, no system call, so it costs nothing per
// operation. A stopped or wedged worker stops publishing.
//
// The supervisor (run-local's launcher, a node agent) reads the files of its ranks. When none
// of them has moved for `bound` seconds the job is stalled, and check() names the rank to
// blame, in this order:
//   1. a rank whose process is stopped (SIGSTOP, a debugger: /proc/PID/stat says T or t);
//   2. a rank that is inside a computation (not waiting for anyone): a stuck kernel or loop;
//   3. the rank at the end of the chain "waits for" (a rank receiving from rank r waits for r);
//      a chain that leaves the ranks this supervisor sees names that rank as remote;
//   4. else (everyone inside collectives) the rank that moved last longest ago.
// While any rank is still starting, only 1 is judged before kStartS.
// A supervisor that sees only some of the job's ranks (a node agent) trusts only 1, 2 and a
// chain that leaves its ranks: otherwise its ranks may be waiting, inside a collective, for a
// rank elsewhere, and the Stall is `remote` with rank -1.
// Synchronous training stalls everywhere once one rank stops (every step ends in the gradient
// sync), so waiting ranks are never blamed while one of the above exists.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diag/diag.hpp"
#include "plan/plan.hpp"

namespace het::progress {

enum class Activity : std::int32_t {
  starting = 0,    // connecting to its peers
  computing = 1,   // a forward, backward, optimizer step: waits for nobody
  receiving = 2,   // waits for activations or gradients from `peer`
  collective = 3,  // inside a TP/CP collective, the gradient sync or the loss gather
  finished = 4,    // ran every step
};
const char* to_string(Activity a);

// What a rank last published.
struct Snapshot {
  int rank = 0;
  int pid = 0;
  std::uint64_t beats = 0;  // +1 per publication
  int step = -1;            // -1 before the first
  Activity activity = Activity::starting;
  int peer = -1;            // receiving: the rank it waits for
  std::string what;         // the operation, e.g. "F3", "wait B1", "sync", "tp all-reduce"
};

// The worker's side: creates `dir`/progress.<rank> and publishes into it.
class Reporter {
 public:
  static Result<std::unique_ptr<Reporter>> open(const std::string& dir, int rank);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;
  // `what` is cut to 23 bytes.
  void at(int step, Activity activity, std::string_view what, int peer = -1);

 private:
  Reporter() = default;
  void* map_ = nullptr;
};

// Reads one rank's file; nothing when the worker has not created it yet.
std::optional<Snapshot> read(const std::string& dir, int rank);

// The default bound: a floor (10 s: above any step of the shipped configs' plans run dilated,
// and low enough that a hang stops the job within 15 s) or five predicted steps as the run
// executes them (the plan's predicted iteration times the run's slowdown: `slowdown` (time
// dilation, an agent's emulated slowdown) and, with emulated devices, the slowest device's
// (fastest peak / slowest peak)), whichever is larger. A plan without a prediction: the floor.
double default_bound_s(double predicted_step_s, double slowdown);
double default_bound_s(const Plan& plan, double slowdown, bool emulate_devices);
constexpr double kFloorS = 10;
// While a rank is still starting (opening its device, connecting to its peers: CUDA and NCCL
// initialisation can take tens of seconds on a loaded node) the bound is at least this: the
// 120 s a worker gives its peers to connect (Peers::connect and the seats' exchange in
// apps/hetexec/main.cpp), which report a peer that never comes themselves. A stopped process
// is blamed at the plain bound in any phase.
constexpr double kStartS = 120;

struct Stall {
  int rank = 0;
  bool remote = false;  // the blamed rank is not one this supervisor sees (-1: not known which)
  std::string why;      // a sentence: "rank 3 made no progress for 10.2 s: its process is stopped ..."
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // `ranks`: the job ranks this supervisor runs (their files are in `dir`); `all`: they are all
  // of the job's ranks.
  Watchdog(std::string dir, std::vector<int> ranks, double bound_s, bool all = true, Clock::time_point start = Clock::now());
  // Reads every rank's file; a Stall once none has moved for bound_s. Ranks that finished
  // are not waited for.
  std::optional<Stall> check(Clock::time_point now = Clock::now());
  // The process the supervisor started for `rank`: a rank stopped before it first published
  // (while loading its plan) is still found stopped. Safe from any thread.
  void spawned(int rank, int pid);
  // The longest any of the ranks that have not finished has been still, in seconds.
  double still_s(Clock::time_point now = Clock::now()) const;

 private:
  std::string dir_;
  std::vector<int> ranks_;
  double bound_s_;
  bool all_;
  std::vector<Snapshot> last_;
  std::vector<Clock::time_point> moved_;
  std::mutex spawned_mu_;
  std::vector<int> spawned_;  // by index of ranks_; 0: not known
};

}  // namespace het::progress
