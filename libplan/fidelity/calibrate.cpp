#include "fidelity/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "cost/compute.hpp"
#include "predict/stage_cost.hpp"

namespace het::fidelity {

namespace {

// The plan predicted as the dilated run, beside the trace.
Result<Comparison> predict_beside(const Plan& plan, const std::vector<ProfileSpec>& profiles,
                                  const std::vector<sim::TraceEvent>& measured, const CalibrateOptions& o) {
  Plan dilated = plan;
  std::vector<ProfileSpec> slow = profiles;
  if (o.time_dilation != 1) {
    emulated_run(dilated, slow, o.time_dilation);
  }
  cost::ComputeModel compute(dilated.model, slow);
  auto outcome = predict::predict(dilated, compute, o.predict);
  if (!outcome) return outcome.errors();
  return compare(*outcome, measured);
}

// Errors: a stage track ("pN sM compute") in the trace that the plan does not have. compare()
// finds the plan's stages in the trace; this finds the trace's in the plan, so that a run of
// a plan with more stages or pipelines is not fitted as if it were this one's.
Result<Done> same_stages(const Plan& plan, const std::vector<sim::TraceEvent>& measured) {
  std::set<std::string> seen;
  for (const auto& e : measured) {
    int p = -1, s = -1, n = 0;
    if (!seen.insert(e.track).second || std::sscanf(e.track.c_str(), "p%d s%d compute%n", &p, &s, &n) != 2 ||
        n != int(e.track.size()))
      continue;
    if (p >= int(plan.pipelines.size()) || s >= int(plan.pipelines[std::size_t(p)].stages.size()))
      return Diagnostic{"", 0, 0, "", "the trace has a track \"" + e.track + "\" for a stage the plan does not have: is it a run of this plan?"};
  }
  return Done{};
}

std::string device_of(const Plan& plan, const std::string& subcluster) {
  const SubclusterSpec* sub = plan.cluster.find(subcluster);
  return sub ? sub->device.type : std::string();
}

// measured ÷ predicted of one column, the stages' ratios weighted by their unit counts; 0 stages
// when no stage of the device type has both.
struct Fit {
  double ratio = 1;
  int stages = 0;
};
Fit fit(const Plan& plan, const Comparison& c, const std::string& device, double StageTimes::*field) {
  double weighted = 0, weights = 0;
  int n = 0;
  for (const auto& r : c.stages) {
    if (device_of(plan, r.subcluster) != device) continue;
    const double p = r.predicted.*field, m = r.measured.*field;
    if (!(p > 0) || !(m > 0)) continue;
    const predict::UnitCounts u =
        predict::count_units(plan, plan.pipelines[std::size_t(r.pipeline)].stages[std::size_t(r.stage)]);
    const double w = std::max(1.0, u.layers + (u.embedding ? 1 : 0) + (u.head ? 1 : 0));
    weighted += w * m / p, weights += w, ++n;
  }
  return n ? Fit{weighted / weights, n} : Fit{};
}

void scale(ProfileSpec& p, double forward, double backward, double optimizer) {
  for (auto& r : p.units) {
    r.forward *= forward, r.backward *= backward;
    if (r.recompute) *r.recompute *= backward;
  }
  for (auto& s : p.optimizer_step) s.time *= optimizer;
}

std::string times(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "x%.4g", x);
  return buf;
}

}  // namespace

Result<Calibration> calibrate(const Plan& plan, const std::vector<ProfileSpec>& given,
                              const std::vector<sim::TraceEvent>& measured, const CalibrateOptions& o) {
  Calibration out;
  // The plan's device types, in the cluster's order, and how many stages each has.
  for (const auto& sub : plan.cluster.subclusters) {
    int stages = 0;
    for (const auto& p : plan.pipelines)
      for (const auto& s : p.stages) stages += s.subcluster == sub.name;
    if (stages == 0) continue;
    auto it = std::find_if(out.devices.begin(), out.devices.end(), [&](const DeviceFit& d) { return d.device == sub.device.type; });
    if (it == out.devices.end()) out.devices.push_back({sub.device.type, stages, {}, {}, {}, {}, {}});
    else it->stages += stages;
  }
  std::vector<ProfileSpec> profiles = given;
  auto profile_of = [&](const std::string& device) -> ProfileSpec* {
    ProfileSpec* found = nullptr;
    for (auto& p : profiles)
      if (p.device == device) found = &p;  // the last one, as the cost model takes it
    return found;
  };

  if (auto same = same_stages(plan, measured); !same) return same.errors();
  auto first = predict_beside(plan, profiles, measured, o);
  if (!first) return first.errors();
  out.before = *first;
  Comparison now = *first;
  for (out.passes = 0; out.passes < o.max_passes;) {
    ++out.passes;
    bool settled = true;
    for (auto& d : out.devices) {
      const Fit f = fit(plan, now, d.device, &StageTimes::forward_s);
      const Fit b = fit(plan, now, d.device, &StageTimes::backward_s);
      const Fit op = fit(plan, now, d.device, &StageTimes::optimizer_s);
      d.forward.stages = f.stages, d.backward.stages = b.stages, d.optimizer.stages = op.stages;
      ProfileSpec* p = profile_of(d.device);
      if (!p) {  // nothing to rescale: the first pass's ratios are the factors
        d.forward.value = f.ratio, d.backward.value = b.ratio, d.optimizer.value = op.ratio;
        continue;
      }
      const double optimizer = p->optimizer_step.empty() ? 1 : op.ratio;  // analytic: nothing to scale
      d.forward.value *= f.ratio, d.backward.value *= b.ratio, d.optimizer.value *= optimizer;
      scale(*p, f.ratio, b.ratio, optimizer);
      for (double r : {f.ratio, b.ratio, optimizer}) settled = settled && std::fabs(r - 1) <= o.tolerance;
    }
    auto next = predict_beside(plan, profiles, measured, o);
    if (!next) return next.errors();
    now = *next;
    if (settled) break;
  }
  out.after = now;

  for (auto& d : out.devices) {
    const ProfileSpec* p = profile_of(d.device);
    if (!p) {
      d.notes.push_back("no profile: its costs are analytic, and measured / analytic is " +
                        times(d.forward.value) + " forward, " + times(d.backward.value) +
                        " backward; no rows written (a stage measures the sum of its unit kinds, and splitting it by "
                        "the analytic model's ratios would write guesses as measurements): profile it with "
                        "`hetexec profile` and calibrate that");
      continue;
    }
    d.profile = *p;
    if (p->optimizer_step.empty()) {
      d.notes.push_back("the profile has no optimizer_step (the optimizer is costed analytically): not calibrated");
      d.optimizer = {};
    }
    if (d.forward.stages == 0) d.notes.push_back("no stage on " + d.device + " measured a forward: forward rows unchanged");
    if (d.backward.stages == 0) d.notes.push_back("no stage on " + d.device + " measured a backward: backward rows unchanged");
    if (d.optimizer.stages == 0 && !p->optimizer_step.empty())
      d.notes.push_back("no stage on " + d.device + " measured an optimizer step: optimizer_step unchanged");
  }
  return out;
}

std::string calibration_header(const DeviceFit& fit, const std::string& trace, const std::string& plan,
                               const std::string& source, double time_dilation, int steps_used) {
  char dilation[32];
  std::snprintf(dilation, sizeof dilation, "%g", time_dilation);
  std::string h = "Calibrated by `hetplan calibrate` from the measured trace " + trace + " of the plan " + plan + " (" +
                  std::to_string(steps_used) + " steps after the first" +
                  (time_dilation != 1 ? std::string(", time dilation ") + dilation + " undone: these are the undilated machine's times"
                                      : std::string()) +
                  "), starting from " + source + ".\n";
  auto line = [&](const char* rows, const Factor& f) {
    h += std::string(rows) + " " + times(f.value) + " (measured / predicted over " + std::to_string(f.stages) + " stage" +
         (f.stages == 1 ? "" : "s") + ")\n";
  };
  line("forward rows", fit.forward);
  line("backward and recompute rows", fit.backward);
  line("optimizer_step", fit.optimizer);
  for (const auto& n : fit.notes) h += n + "\n";
  h.pop_back();
  return h;
}

}  // namespace het::fidelity
