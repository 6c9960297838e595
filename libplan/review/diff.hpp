#pragma once
// What changed between two plans (`hetplan diff`), in words a reviewer understands.
//
// Structure: the schedule, the granularity, the embedded model and cluster (field by field),
// pipelines and stages added or removed, and per pipeline its micro-batch size and count,
// per stage its subcluster, devices, unit range ("layers"), tp/cp/dp, recompute and warm-up
// count. Pipelines are matched by index, and stages by index within their pipeline, as the
// plan numbers them. A warm-up count is compared only when both plans give one (it is a
// derived field that a hand-written plan may leave out).
//
// Predictions: every metric both plans carry (iteration time, tokens/s, MFU, bubble, load
// balance, cross-subcluster bytes and overlap; per stage of both plans its forward and
// backward time and peak memory), with the relative change. When either plan has no
// predictions, none are compared and `not_compared` says why.
//
// Not compared: the search's statistics (`algorithm`) and profile digests, which differ
// between two searches that find the same plan.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"

namespace het::review {

// One structural difference between plan A and plan B.
struct Change {
  enum class Kind { added, removed, changed };
  Kind kind = Kind::changed;
  std::optional<int> pipeline, stage;  // where; empty for plan-wide changes
  std::string field;                   // "layers", "tp", "num_microbatches", "schedule.kind",
                                       // "cluster.subclusters[1].device.memory", ...;
                                       // "pipeline" or "stage" when one was added or removed
  nlohmann::ordered_json from, to;     // as in the plan file; null on the side without it
  std::string text;                    // one sentence, e.g. "pipeline 0 stage 1: tp 2 -> 4"
};
const char* to_string(Change::Kind kind);  // "added", "removed", "changed"

// A predicted metric whose value differs between the plans.
struct MetricDelta {
  std::string metric;                  // iteration_s, tokens_per_s, mfu, bubble_fraction,
                                       // load_balance_eta, cross_cluster_bytes, cross_overlap;
                                       // per stage: forward_s, backward_s, memory_bytes
  std::optional<int> pipeline, stage;  // set for per-stage metrics
  double from = 0, to = 0;
  std::optional<double> change;        // (to - from) / from; empty when from is 0
  std::string text;                    // e.g. "iteration 10.40 s -> 9.86 s (-5.2%)"
};

struct PlanDiff {
  std::vector<Change> changes;
  std::vector<MetricDelta> metrics;
  std::string not_compared;  // why predictions were not compared; empty when they were
  bool same() const { return changes.empty() && metrics.empty(); }
};

// `a_name`, `b_name` name the plans in sentences (their files).
PlanDiff diff_plans(const Plan& a, const Plan& b, const std::string& a_name, const std::string& b_name);

// Text for people: a "same" line, or a header line then one line per change and metric.
std::string to_text(const PlanDiff& diff, const std::string& a_name, const std::string& b_name);
// {same, a, b, changes: [{kind, pipeline, stage, field, from, to, text}],
//  metrics: [{metric, pipeline, stage, from, to, change, text}], not_compared}
nlohmann::ordered_json to_json(const PlanDiff& diff, const std::string& a_name, const std::string& b_name);

// "a100 node 0: 0-3", the devices of a stage for sentences (shared with check).
std::string describe_devices(const std::string& subcluster, const std::vector<DeviceRef>& devices);

}  // namespace het::review
