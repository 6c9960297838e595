#pragma once
// Emulating a slower device on this machine (run-local/agents: --emulate-devices,
// --time-dilation): the compute a rank's thread does runs `factor` times longer in wall time,
// by sleeping after it, so that the rank behaves as a device `factor` times slower than this
// core, and N ranks can share few cores without contending (while one sleeps, another
// computes).
//
// Compute is what the thread does between waits. With `cpu_clock` it is measured in the
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time the thread spends descheduled (another
// rank on its core) does not count, so a dilated run measures the same whatever else the
// machine runs. That is right only when the thread does all of its rank's compute (the CPU
// backend on one thread); otherwise compute is measured in wall time. Waiting for a peer is
// not compute: wrap every blocking call in wait().
namespace het::runtime {

class Pace {
 public:
  // factor >= 1; 1 stretches nothing.
  Pace(double factor, bool cpu_clock);

  // Stretches the compute since the last mark to `factor` times its duration (sleeps until
  // mark + factor × compute), then marks.
  void settle();
  // Starts the device's compute now: what ran since the last mark is not stretched (the host's
  // bookkeeping between the device's operations: the next batch, a send's copy, the trace).
  void restart() { mark(); }
  // Runs a blocking call: settles the compute before it, and marks after it (the wait itself
  // is not stretched).
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
  // the compute measured), the waits left out. The difference over an operation is its compute.
  double computed_s() const { return computed_s_; }

 private:
  void mark();
  double factor_;
  bool cpu_clock_;
  double mark_wall_ = 0, mark_compute_ = 0;
  double computed_s_ = 0;
};

}  // namespace het::runtime
