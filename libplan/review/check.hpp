#pragma once
// Whether a plan still holds (`hetplan check`, made for CI): the plan is validated against
// its model and cluster (the current ones when the caller replaced the plan's own),
// re-simulated with its profiles (the plan's embedded ones, replaced by given files:
// choose_profiles(); the analytic cost model for device types without one), and held to
// these rules:
//   valid       the plan validates against its model and cluster (devices exist and fit the
//               stage shapes, units covered, ...) and its schedule runs;
//   profiles    every profile the plan was predicted with is available (embedded or given),
//               so that the other rules do not pass on analytic costs;
//   memory      every stage keeps 1 - peak/capacity >= min_memory_headroom on its device
//               (capacity: the device's memory less its reserve, configs/devices.yaml)
//               type (a stage that does not fit fails with the default 0);
//   regression  the iteration time is at most (1 + max_regression) × the baseline's
//               recorded predicted iteration time;
//   iteration   the iteration time is at most max_iteration_s.
// The other rules need a simulation, so they are not applied to a plan that is not valid.
// Each violation names the stage and its devices where one is to blame.
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "plan/plan.hpp"
#include "plan/profiles.hpp"
#include "predict/predict.hpp"

namespace het::review {

struct Baseline {
  std::string file;  // for sentences
  Plan plan;         // must carry predicted.iteration_s
};

struct CheckRules {
  std::optional<Baseline> baseline;      // the regression rule applies when set
  double max_regression = 0.05;          // allowed (new - baseline) / baseline iteration time
  double min_memory_headroom = 0;        // 1 - peak/capacity each stage must keep
  std::optional<double> max_iteration_s;
};

struct Violation {
  std::string rule;                    // "valid", "profiles", "memory", "regression", "iteration"
  std::optional<int> pipeline, stage;  // the stage to blame, when there is one
  std::string message;                 // one line for people
};

struct CheckReport {
  std::vector<Violation> violations;
  std::optional<predict::Outcome> outcome;  // the re-simulation; absent when the plan is not valid
  std::string summary;                      // one line: what was checked and the margins
  std::vector<std::string> notes;           // e.g. a profile that was not used or was replaced
  bool ok() const { return violations.empty(); }
};

// `plan` as read (not yet validated); `file` names it in messages. Errors: a baseline
// without a predicted iteration time.
Result<CheckReport> check_plan(const Plan& plan, const std::string& file, const ProfileChoice& profiles,
                               const CheckRules& rules);

// A share for a threshold option: "5%" or "0.05" (a bare number must lie in [0, 1]).
// `option` names the option in the error.
Result<double> parse_share(const std::string& text, const std::string& option);

// {ok, plan, iteration_s, summary, violations: [{rule, pipeline, stage, message}], notes}
nlohmann::ordered_json to_json(const CheckReport& report, const std::string& file);

}  // namespace het::review
