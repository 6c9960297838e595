#include "review/check.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <set>

#include "cost/compute.hpp"
#include "plan/validate.hpp"
#include "review/diff.hpp"
#include "review/text.hpp"

namespace het::review {

namespace {

using text::fmt;
using text::seconds;

std::string pct(double share) { return fmt("%.1f%%", 100 * share); }
std::string gib(double bytes) { return fmt("%.2f GiB", bytes / (1024.0 * 1024 * 1024)); }

// "pipeline 0 stage 1 (v100 node 0: 0-3, V100-16GB)"
std::string stage_label(const Plan& plan, int p, int s) {
  const Stage& st = plan.pipelines[p].stages[s];
  const SubclusterSpec* sub = plan.cluster.find(st.subcluster);
  return "pipeline " + std::to_string(p) + " stage " + std::to_string(s) + " (" +
         describe_devices(st.subcluster, st.devices) + (sub ? ", " + sub->device.type : "") + ")";
}

// The stage a diagnostic's field path points into: "pipelines[0].stages[2].devices[1]".
std::pair<std::optional<int>, std::optional<int>> stage_of(const std::string& path) {
  int p = 0, s = 0;
  if (std::sscanf(path.c_str(), "pipelines[%d].stages[%d]", &p, &s) == 2) return {p, s};
  if (std::sscanf(path.c_str(), "pipelines[%d]", &p) == 1) return {p, std::nullopt};
  return {};
}

// The stage to name for a time rule: the one that slowed most against the baseline (same
// shape, both predicted), else the slowest one. "slowed most: pipeline 0 stage 1 (...), ...".
std::string blame(const predict::Outcome& now, const Plan* baseline, std::optional<int>& p, std::optional<int>& s) {
  const Plan& plan = now.plan;
  auto busy = [](const Stage& st) { return st.predicted->forward_s + st.predicted->backward_s; };
  bool comparable = baseline && baseline->pipelines.size() == plan.pipelines.size();
  for (std::size_t pi = 0; comparable && pi < plan.pipelines.size(); ++pi) {
    const auto& a = baseline->pipelines[pi].stages;
    comparable = a.size() == plan.pipelines[pi].stages.size() &&
                 std::all_of(a.begin(), a.end(), [&](const Stage& st) { return st.predicted && busy(st) > 0; });
  }
  double worst = -std::numeric_limits<double>::infinity();
  std::string why;
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    for (std::size_t si = 0; si < plan.pipelines[pi].stages.size(); ++si) {
      const double t = busy(plan.pipelines[pi].stages[si]);
      const double before = comparable ? busy(baseline->pipelines[pi].stages[si]) : 0;
      const double score = comparable ? t / before : t;
      if (score <= worst) continue;
      worst = score, p = int(pi), s = int(si);
      why = comparable ? "slowed most: " + stage_label(plan, p.value(), s.value()) + ", forward+backward " +
                             seconds(before) + " -> " + seconds(t) + " per micro-batch (" +
                             fmt("%+.1f%%", 100 * (t / before - 1)) + ")"
                       : "slowest stage: " + stage_label(plan, p.value(), s.value()) + ", forward+backward " +
                             seconds(t) + " per micro-batch";
    }
  }
  return why;
}

// Device types whose baseline's recorded prediction came from a profile that the plan is
// not costed with now: its regression compares costs of different kinds.
std::vector<std::string> baseline_profiles_not_used(const Plan& plan, const Plan* baseline,
                                                    const cost::ComputeModel& compute) {
  std::vector<std::string> notes;
  if (!baseline || !baseline->predicted) return notes;
  for (const auto& t : profiled_device_types(*baseline->predicted, plan.cluster))
    if (!compute.has_profile(t))
      notes.push_back("the baseline's prediction costed " + t + " from a profile, but the plan has none for " + t +
                      ": its stages are now costed by the analytic model");
  return notes;
}

}  // namespace

Result<CheckReport> check_plan(const Plan& plan, const std::string& file, const ProfileChoice& profiles,
                               const CheckRules& rules) {
  const Plan* baseline = rules.baseline ? &rules.baseline->plan : nullptr;
  if (baseline && (!baseline->predicted || baseline->predicted->iteration_s <= 0))
    return Diagnostic{rules.baseline->file, 0, 0, "predicted.iteration_s",
                      "the baseline has no predicted iteration time to compare with; write one with "
                      "`hetplan simulate BASELINE -o BASELINE`"};
  CheckReport report;
  auto violate = [&](std::string rule, std::optional<int> p, std::optional<int> s, std::string message) {
    report.violations.push_back({std::move(rule), p, s, std::move(message)});
  };
  const std::string failed_summary = "FAILED: " + file + ": ";

  for (const auto& d : validate_plan(plan, file)) {
    auto [p, s] = stage_of(d.path);
    violate("valid", p, s, "not valid on cluster " + plan.cluster.name + ": " + d.to_string());
  }
  if (!report.ok()) {
    report.summary = failed_summary + "not valid (" + std::to_string(report.violations.size()) +
                     " problem" + (report.violations.size() == 1 ? "" : "s") + "), not simulated";
    return report;
  }
  for (const auto& p : profiles.unavailable)
    violate("profiles", std::nullopt, std::nullopt,
            unavailable_sentence(p) + "; give it with --profile (`hetplan simulate PLAN --profile F -o PLAN` embeds it)");
  cost::ComputeModel compute(plan.model, profiles.specs());
  auto outcome = predict::predict(plan, compute, predict::Options{});
  if (!outcome) {
    for (const auto& d : outcome.errors()) violate("valid", std::nullopt, std::nullopt, "does not run: " + d.to_string());
    report.summary = failed_summary + "the schedule does not run";
    return report;
  }
  report.notes = profiles.notes;
  for (auto& n : compute.notes()) report.notes.push_back(std::move(n));
  for (auto& n : baseline_profiles_not_used(plan, baseline, compute)) report.notes.push_back(std::move(n));
  const predict::Outcome& o = *outcome;
  const double iteration = o.plan.predicted->iteration_s;
  std::string passed = "valid on " + plan.cluster.name + "; iteration " + seconds(iteration);

  // Memory: headroom of every stage on its device type.
  double least = std::numeric_limits<double>::infinity();
  std::pair<int, int> least_at{0, 0};
  for (std::size_t pi = 0; pi < o.stages.size(); ++pi) {
    for (std::size_t si = 0; si < o.stages[pi].size(); ++si) {
      const auto& d = o.stages[pi][si];
      const double peak = d.memory.total();
      const double headroom = 1 - peak / d.capacity;
      if (headroom < least) least = headroom, least_at = {int(pi), int(si)};
      if (headroom >= rules.min_memory_headroom) continue;
      const std::string label = stage_label(o.plan, int(pi), int(si));
      violate("memory", int(pi), int(si),
              peak > d.capacity
                  ? label + " does not fit: peak " + gib(peak) + " per device, usable capacity " + gib(d.capacity) +
                        " (headroom " + pct(headroom) + ", minimum " + pct(rules.min_memory_headroom) + ")"
                  : label + ": memory headroom " + pct(headroom) + " (peak " + gib(peak) + " of " + gib(d.capacity) +
                        " usable per device), below the minimum " + pct(rules.min_memory_headroom));
    }
  }

  // Regression against the baseline's recorded prediction.
  if (baseline) {
    const double before = baseline->predicted->iteration_s;
    const double change = iteration / before - 1;
    passed += " (baseline " + seconds(before) + ": " + fmt("%+.1f%%", 100 * change) + ", allowed " +
              fmt("%+.1f%%", 100 * rules.max_regression) + ")";
    if (change > rules.max_regression) {
      std::optional<int> p, s;
      const std::string why = blame(o, baseline, p, s);
      violate("regression", p, s,
              "iteration " + seconds(before) + " -> " + seconds(iteration) + " (" + fmt("%+.1f%%", 100 * change) +
                  ") against the baseline " + rules.baseline->file + ", more than the allowed " +
                  fmt("%+.1f%%", 100 * rules.max_regression) + "; " + why);
    }
  }
  if (rules.max_iteration_s) {
    passed += ", maximum " + seconds(*rules.max_iteration_s);
    if (iteration > *rules.max_iteration_s) {
      std::optional<int> p, s;
      const std::string why = blame(o, nullptr, p, s);
      violate("iteration", p, s,
              "predicted " + seconds(iteration) + " per iteration, more than the maximum " +
                  seconds(*rules.max_iteration_s) + "; " + why);
    }
  }
  passed += "; memory headroom at least " + pct(least) + " (" + stage_label(o.plan, least_at.first, least_at.second) +
            ", minimum " + pct(rules.min_memory_headroom) + ")";

  if (report.ok()) {
    report.summary = "ok: " + file + ": " + passed;
  } else {
    std::set<std::string> broken;
    for (const auto& v : report.violations) broken.insert(v.rule);
    std::string names;
    for (const auto& r : broken) names += (names.empty() ? "" : ", ") + r;
    report.summary = failed_summary + std::to_string(report.violations.size()) + " violation" +
                     (report.violations.size() == 1 ? "" : "s") + " (" + names + "); " + passed;
  }
  report.outcome = std::move(*outcome);
  return report;
}

Result<double> parse_share(const std::string& text, const std::string& option) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  double v = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  const bool parsed = !number.empty() && ec == std::errc() && end == number.data() + number.size();
  if (parsed && percent && v >= 0) return v / 100;
  if (parsed && !percent && v >= 0 && v <= 1) return v;
  return Diagnostic{"", 0, 0, option,
                    "expected a share like 5% or 0.05, got '" + text + "'" +
                        (parsed && !percent && v > 1 ? " (a bare number is a fraction; write " + text + "% for percent)"
                                                     : "")};
}

nlohmann::ordered_json to_json(const CheckReport& report, const std::string& file) {
  using Json = nlohmann::ordered_json;
  auto opt = [](const std::optional<int>& v) { return v ? Json(*v) : Json(); };
  Json violations = Json::array();
  for (const auto& v : report.violations)
    violations.push_back({{"rule", v.rule}, {"pipeline", opt(v.pipeline)}, {"stage", opt(v.stage)}, {"message", v.message}});
  return {{"ok", report.ok()},
          {"plan", file},
          {"iteration_s", report.outcome ? Json(report.outcome->plan.predicted->iteration_s) : Json()},
          {"summary", report.summary},
          {"violations", violations},
          {"notes", report.notes}};
}

}  // namespace het::review
