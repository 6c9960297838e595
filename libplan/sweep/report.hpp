#pragma once
// A sweep's results for people and machines: one row per point (the varied value and the best
// plan found there), as a table, as JSON, and as an SVG chart of iteration time and tokens/s
// against the value, with the plan's shape at each point.
//
// The chart is self-contained (no scripts, fonts or links; every name from the inputs
// escaped), a pure function of its rows, and readable in a browser as drawn: the x axis is
// logarithmic when the values were spaced by a ratio, and points are drawn at their numbers
// when every value has one (else evenly, labelled by the value's text).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"
#include "sweep/vary.hpp"

namespace het::sweep {

struct Row {
  std::string value;               // as written into the document
  std::optional<double> number;    // the value's number, when it has one
  std::optional<Plan> plan;        // the best plan found, predicted; none when none fits
  std::string error;               // why there is none (the search's or the inputs' sentence)
  double search_s = 0;             // the search's wall time
};

// "2 pipelines x 3 stages: a100 tp8 (layers 0-13), a100 dp2 tp4 (14-27), v100 tp8 (28-31)"; pipelines of
// different shapes listed one by one.
std::string shape_of(const Plan& plan);
// Devices the plan uses, of the cluster's.
int devices_used(const Plan& plan);
// A predicted plan as one point: iteration_s, tokens_per_s, mfu, cost_usd_per_hour and
// usd_per_million_tokens (when it has them), devices_used, devices, pipelines, plan (shape_of).
nlohmann::ordered_json point_json(const Plan& plan);

std::string table(const Vary& vary, const std::vector<Row>& rows);
nlohmann::ordered_json to_json(const Vary& vary, const std::vector<Row>& rows);
std::string svg(const Vary& vary, const std::vector<Row>& rows, const std::string& title);

}  // namespace het::sweep
