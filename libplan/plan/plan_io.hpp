#pragma once
// Reading and writing plans as JSON (hetplan.plan/v1).
//
// read_plan() accepts a complete plan or a hand-written one holding only the decision
// fields; the model and cluster come from the plan itself or from `specs` (which win when
// both are present, so a plan can be checked against current specs). It checks the schema
// only; validate_plan() checks that the plan makes sense for its model and cluster. An
// embedded profile (profiles[].profile) is read as read_profile() reads a profile file, its
// problems located in the plan file (`profiles[0].profile.units[3].forward`).
#include <string>

#include "diag/diag.hpp"
#include "input/input.hpp"
#include "plan/plan.hpp"

namespace het {

struct PlanSpecs {
  const ModelSpec* model = nullptr;      // overrides the plan's own when set
  const ClusterSpec* cluster = nullptr;  // overrides the plan's own when set
  const DeviceCatalog* catalog = nullptr;  // resolves device names of an embedded cluster
};

Result<Plan> read_plan(const input::Document& doc, const PlanSpecs& specs);
Result<Plan> load_plan(const std::string& file, const PlanSpecs& specs);

nlohmann::ordered_json to_json(const Plan& plan);
// A pipeline's `seq_lengths` as the plan file has them: [{length, microbatches}], one per bucket
// of the model.
nlohmann::ordered_json seq_lengths_json(const ModelSpec& model, const Pipeline& pipeline);
// Pretty JSON text with a trailing newline.
std::string write_plan(const Plan& plan);

}  // namespace het
