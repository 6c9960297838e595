#pragma once
// Emulating a slower device on this machine (run-local/agents: --emulate-devices,
// --time-dilation): the compute a rank's thread does runs `factor` times longer in wall time,
// by sleeping after it, so that the rank behaves as a device `factor` times slower than this
// core, and N ranks can share few cores without contending (while one sleeps, another
// computes).
//
// Compute is what the thread does inside a device operation (begin() ... end()) between
// waits; what it does between operations (the trace, a memory sample, a send's copy, the next
// batch) is the host's, which a GPU's host does while the device computes: never stretched.
// Stretched, it was 0.2-1.8 ms of every "wait B" of a tp-2 stage under X = 32, most of that
// stage's waiting (docs/executor.md "The host's bookkeeping is not the device's"). With `cpu_clock` it is measured in the
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time the thread spends descheduled (another
// rank on its core) does not count, so a dilated run measures the same whatever else the
// machine runs. That is right only when the thread does all of its rank's compute (the CPU
// backend on one thread); otherwise compute is measured in wall time. Waiting for a peer is
// not compute: wrap every blocking call in wait().
//
// The emulated device takes the same time for the same work each time, as a GPU runs the same
// kernels on the same shapes: a stretch lasts `factor` times the median of the last kWindow
// computes of the same run of compute this run has measured (itself included), not `factor`
// times its own. A run of compute is named by the operation it belongs to (begin()) and its
// place in it (the n-th settle since begin()): the rank program runs the same operations in the
// same order every step. On this project's 2-core VM two TP members' computes between the same
// two all-reduces inside one forward or backward differ by 19-22% of it (standard deviation;
// llama-tp2 and llama-mixed-dp-tp of bench/fidelity, 2026-11-29), most of it the host's, not
// the work's; stretched 8-16x, that spread made the early member wait at every collective, and
// the members' all-reduces took a mean 1.2-1.8x their p50 (docs/executor.md "A device as steady as a GPU").
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace het::runtime {

// The least time dilation at which `busy_threads` dilated threads (ranks x threads each) keep
// at most an eighth of `cores` busy: the least of 8, 16, 32, ... with busy_threads / X <=
// cores / 8 (2 cores: 8 up to 2 threads, 16 up to 4, 32 up to 8). Below it the ranks' wake-ups
// find the cores computing and wait for one: on the 2-core VM a TP all-reduce's mean rose over
// its median by 303 us (55%) beside 2 other dilated ranks at X = 8, 148 us (13%) at 16, and by
// 241 us (22%) beside 6 at 16, 68 us (3%) at 32 (bench_link 1000 300 4096 N X); the demo's 4
// ranks at X = 4 measured 1.38x their prediction (docs/executor.md "How much of the cores the
// ranks may keep busy"). bench/fidelity/report.py quiet_dilation is the benches' copy of this rule
// (tests/pace_test.cpp holds the two to the same answers).
int quiet_dilation(int busy_threads, int cores);

class Pace {
 public:
  // factor >= 1; 1 stretches nothing.
  Pace(double factor, bool cpu_clock);

  // Stretches the compute since the last mark to `factor` times the median duration of this
  // run of compute (sleeps until mark + factor × median), then marks; outside an operation it
  // only marks.
  void settle();
  // A device operation starts: marks (as restart()), and names the runs of compute that follow
  // (op, 0), (op, 1), ... until the next begin().
  void begin(std::string_view op);
  // The operation ends: settles its last run of compute. Until the next begin() the device is
  // idle: settle() and wait() stretch nothing.
  void end() {
    settle();
    busy_ = false;
  }
  // Starts the device's compute now: what ran since the last mark is not stretched (the host's
  // bookkeeping between the device's operations: the next batch, a send's copy, the trace).
  void restart() { mark(); }
  // Runs a blocking call: settles the compute before it (inside an operation), and marks after
  // it (the wait itself is not stretched).
  template <class F>
  decltype(auto) wait(F&& blocking) {
    settle();
    struct Mark {
      Pace& p;
      ~Mark() { p.mark(); }
    } mark{*this};
    return blocking();
  }

  double factor() const { return factor_; }
  // The compute settled so far, stretched: the emulated device's own compute time (factor ×
  // the median compute measured), the waits left out. The difference over an operation is its
  // compute.
  double computed_s() const { return computed_s_; }

 private:
  // The last kWindow computes of one run of compute: enough to outvote a disturbed one or two,
  // few enough to follow a slow spell of the host within a few steps.
  static constexpr std::size_t kWindow = 9;
  struct Runs {
    std::vector<double> last;  // ring of up to kWindow computes, s
    std::size_t next = 0;
  };
  double typical(double compute);  // the median of the current run's window, `compute` added
  void mark();
  double factor_;
  std::string op_;
  int chunk_ = 0;
  std::unordered_map<std::string, Runs> runs_;
  bool cpu_clock_;
  bool busy_ = false;  // inside an operation (begin() ... end())
  double mark_wall_ = 0, mark_compute_ = 0;
  double computed_s_ = 0;
};

}  // namespace het::runtime
