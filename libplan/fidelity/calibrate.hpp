#pragma once
// Calibrating profiles from a measured run (`hetplan calibrate`, issue 16): the profile's unit
// costs fitted so that a prediction of the measured plan reproduces what its trace measured.
//
// Per device type of the plan's stages, three factors, each measured ÷ predicted: forward (the
// units' forward rows), backward (backward and recompute rows: a recomputing stage's measured
// backward holds its recomputation) and optimizer (optimizer_step). Each is the mean of its
// stages' ratios weighted by their unit counts (the least-squares fit of one factor to the
// stages' relative errors), taken from the per-micro-batch times compare() reads. The fit is
// repeated on the rescaled profile until the factors settle (units costed analytically inside a
// profiled device type do not scale, so one pass can fall short).
//
// Time dilation x (the trace is of `hetexec run-local --time-dilation x`): the prediction is
// made with dilate(cluster, x) and dilate(profile, x), so the factors are ratios of two dilated
// times and the calibrated profile is of the undilated machine, as its input was.
//
// What it does not fit: a device type without a profile (analytic costs) gets factors but no
// profile: a stage's measurement is the sum over its unit kinds, and splitting it by the
// analytic model's ratios would write the model's guesses as measured rows. Links: the trace
// times transfers only together with the wait for the peer's compute ("wait F<j>"), and the
// cost model takes links from the cluster, not from profiles; transfers, sync and the per-step
// costs stay as predicted, and the comparison after calibration shows what is left.
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "fidelity/fidelity.hpp"
#include "plan/plan.hpp"
#include "predict/predict.hpp"
#include "sim/sim.hpp"
#include "spec/profile.hpp"

namespace het::fidelity {

struct Factor {
  double value = 1;  // measured ÷ predicted, over all passes
  int stages = 0;    // stages it was fitted from; 0: nothing measured, value 1
};

struct DeviceFit {
  std::string device;  // device type
  int stages = 0;      // stages of the plan on it
  Factor forward, backward, optimizer;
  std::optional<ProfileSpec> profile;  // the calibrated profile; absent when the type had none
  std::vector<std::string> notes;      // what was not fitted and why, in sentences
};

struct Calibration {
  std::vector<DeviceFit> devices;  // the plan's device types, in the cluster's order
  Comparison before, after;        // the measured plan with the given / the calibrated profiles
  int passes = 0;
};

struct CalibrateOptions {
  double time_dilation = 1;  // >= 1: the run's, as given to hetexec run-local
  predict::Options predict;  // as `hetplan simulate` would predict the plan
  int max_passes = 8;
  double tolerance = 1e-4;   // stop when every factor of a pass is within this of 1
};

// `plan`: validated, with its model and cluster; `profiles`: the undilated profiles of its
// device types (the ones a prediction of it uses); `measured`: read_chrome_trace() of a run of
// the plan. Errors: compare()'s (a trace of another plan, fewer than two steps), predict()'s.
Result<Calibration> calibrate(const Plan& plan, const std::vector<ProfileSpec>& profiles,
                              const std::vector<sim::TraceEvent>& measured, const CalibrateOptions& options);

// The comment lines a calibrated profile file starts with: from which trace of which plan, the
// dilation, the profile it started from, and by how much each family of rows was scaled.
std::string calibration_header(const DeviceFit& fit, const std::string& trace, const std::string& plan,
                               const std::string& source, double time_dilation, int steps_used);

}  // namespace het::fidelity
