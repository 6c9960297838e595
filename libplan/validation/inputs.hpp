#pragma once
// Checks a set of user inputs together, as `hetplan validate` does: each file on its own
// (schema and semantics), then across files (a profile measured for a model of other
// dimensions: one error per differing dimension; a plan against the given model and
// cluster). Each checked input gets a one-line summary for people, or its diagnostics; a
// valid plan may get warnings (profiles it was predicted with that are neither embedded nor
// given: plan/profiles.hpp).
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "plan/plan.hpp"
#include "plan/profiles.hpp"
#include "spec/profile.hpp"

namespace het {

struct InputFiles {
  std::optional<std::string> model, cluster, plan;
  std::optional<std::string> training;  // with a Hugging Face config as the model: its training fields (spec/hf_config.hpp)
  std::vector<std::string> profiles;
  std::optional<std::string> catalog;  // device catalog; the built-in one when absent
};

struct CheckedInput {
  std::string kind;     // "catalog", "model", "cluster", "profile", "plan"
  std::string file;
  std::string summary;  // what was found, when valid
  std::vector<std::string> assumptions;  // a profile's: what its numbers take for granted
  Diagnostics errors;   // empty when valid
  Diagnostics warnings; // problems that do not make it invalid
};

struct InputsReport {
  std::vector<CheckedInput> inputs;
  bool ok() const;
};

InputsReport check_inputs(const InputFiles& files);

// A plan ready to simulate: read with the given model/cluster (which replace the plan's
// own), validated, the given profiles checked against the plan's model, and its profiles
// chosen from the plan's embedded ones and the given files (choose_profiles()). Every
// problem of every file, or the plan.
struct LoadedPlan {
  Plan plan;  // its `profiles` are the chosen ones (profiles.used), so a prediction records them
  ProfileChoice profiles;
};
Result<LoadedPlan> load_plan_inputs(const InputFiles& files);
// The same without validate_plan(): for `hetplan check`, to which a plan that no longer
// validates against a changed cluster is a finding, not an unreadable input.
Result<LoadedPlan> read_plan_inputs(const InputFiles& files);

}  // namespace het
