#pragma once
// `hetexec profile`: measures each unit's forward, backward and recompute time and its memory
// on a backend, per (tp, micro-batch size), and returns them as a hetplan.profile/v1 so
// hetplan plans from measurements. Each time is the median of as many runs as it takes to know
// it within ±options.stop.target (the 95% interval of the median), within a time cap per point,
// timed by options.clock less what reading the clock costs; the spread reached is returned with
// every row. The points are measured in rounds (profiler/sampling.hpp, measure_in_rounds: in
// each, every point not yet known gets a fresh stage, warm-ups and options.stop.min_runs runs),
// so that a passing slowdown of the machine falls on a few runs of each point, not on all of one.
//   - embedding and head alone; a layer: the whole model minus them, over the number of layers
//     (a layer alone stays in cache and runs faster than it does among the others);
//   - tp > 1: one TP shard's compute (its share of heads and MLP channels); the all-reduces
//     are the cost model's, from the link bandwidths, not measured here;
//   - cp > 1: the last context member's compute (its T/cp time steps against all keys before
//     them: the slowest member); its K/V exchanges are the cost model's;
//   - recompute: the forward again (what activation recomputation runs before a backward);
//   - activation memory: the bytes a micro-batch keeps from its forward to its backward;
//     parameter memory: the unit's weights on one device.
// `slowdown` multiplies the times, for an emulated slower device (--emulate-devices).
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "profiler/sampling.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::profiler {

struct Options {
  std::vector<int> micro_batch_sizes = {1, 2, 4};
  std::vector<int> tp = {1};
  std::vector<int> cp = {1};  // context-parallel degrees: the last member's compute (the most keys)
  StopRule stop;              // per measured point (embedding, head, whole model, optimizer step)
  Clock clock = Clock::wall;  // thread_cpu only when the backend computes on the calling thread alone
  double slowdown = 1;
  // Measure as a run dilated X times computes (run-local --time-dilation X): each timed
  // operation is followed by a pause of (X - 1) times its duration, as the run stretches it, and
  // so is each stretch of it before a TP or CP collective (the run settles there too), so that
  // what a pause costs the compute after it (caches and a core gone cold) is in the times. The
  // times are still this machine's (not X times them, the pauses left out even on the wall
  // clock): simulate --time-dilation X scales.
  // The stop rule's max_seconds is then X times as long on the wall clock (of this machine's time).
  double time_dilation = 1;
  std::string device = "cpu";
};

// How precisely a row was measured: the relative half-width of the 95% interval of the median
// of its forward and of its backward time (a layer row: the intervals of the whole model, the
// embedding and the head it is derived from, combined in quadrature, relative to the layer's
// time), and the fewest timed runs of the points it comes from.
struct Spread {
  double forward = 0, backward = 0;
  int runs = 0;
  double max() const { return forward > backward ? forward : backward; }
};

struct Profile {
  ProfileSpec spec;
  std::vector<Spread> spread;  // one per spec.units row, in the same order
  Spread optimizer_step;       // of spec.optimizer_step (forward and backward both the step's)
  // The step's time by phase, summed over its timed runs (the same order as the runtime runs
  // them): gradients made whole on the host (finish_backward), packed, AdamW with the values
  // back, zero_grad (a device backend uploads the values there).
  struct OptimizerParts {
    double to_host = 0, pack = 0, adamw = 0, zero_grad = 0;
  } optimizer_parts;
};

// Errors: a tp that does not divide the heads, kv heads and MLP channels. on_row reports
// progress (one call per measured (unit, tp, micro-batch) row).
Result<Profile> profile(backend::Backend& backend, const ModelSpec& model, const Options& options,
                        const std::function<void(const ProfileRow&, const Spread&)>& on_row = {});

}  // namespace het::profiler
