// libplan/review: the words of a plan diff and the rules of a plan check, on plans made in
// code from tests/data/plans/mixed.plan.json (tiny-gpt on the demo cluster: stage 0 a100
// tp 2 units 0-1, stage 1 a100 dp 2 units 2-3, stage 2 v100 units 4-5).
#include <catch2/catch.hpp>

#include "plan/validate.hpp"
#include "predict/predict.hpp"
#include "review/check.hpp"
#include "review/diff.hpp"
#include "test_util.hpp"

using namespace het;
using Catch::Contains;

namespace {

Plan predicted(const Plan& plan) {
  cost::ComputeModel compute(plan.model, {});
  auto outcome = predict::predict(plan, compute, predict::Options{});
  REQUIRE(outcome);
  return outcome->plan;
}

std::string texts(const review::PlanDiff& d) { return review::to_text(d, "a.json", "b.json"); }

}  // namespace

TEST_CASE("diff: a plan and itself are the same, with one line saying so") {
  for (const Plan& plan : {test::mixed_plan(), predicted(test::mixed_plan())}) {
    auto d = review::diff_plans(plan, plan, "a.json", "b.json");
    CHECK(d.same());
    CHECK(d.changes.empty());
    CHECK(d.metrics.empty());
    const std::string text = texts(d);
    CHECK_THAT(text, Catch::StartsWith("same: a.json and b.json are the same plan"));
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  }
}

TEST_CASE("diff: a moved layer boundary names the units that moved and the neighbour") {
  Plan a = test::mixed_plan(), b = a;
  b.pipelines[0].stages[0].last = 2;   // takes unit 2 (layer 1) from stage 1
  b.pipelines[0].stages[1].first = 3;
  REQUIRE(validate_plan(b, "b").empty());
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  REQUIRE(d.changes.size() == 2);
  CHECK(d.changes[0].text == "pipeline 0 stage 0: layers 0-1 -> 0-2 (boundary moved by 1 unit: takes layer 1 from stage 1)");
  CHECK(d.changes[1].text == "pipeline 0 stage 1: layers 2-3 -> 3-3 (boundary moved by 1 unit: gives layer 1 to stage 0)");
  CHECK(d.changes[1].field == "layers");
  CHECK(d.changes[1].from == nlohmann::ordered_json{2, 3});
  CHECK(d.changes[1].to == nlohmann::ordered_json{3, 3});
}

TEST_CASE("diff: tp, dp and recompute changes are named per stage") {
  Plan a = test::mixed_plan(), b = a;
  b.pipelines[0].stages[0].tp = 1;
  b.pipelines[0].stages[0].dp = 2;
  b.pipelines[0].stages[2].recompute = Recompute::full;
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  const std::string text = texts(d);
  CHECK_THAT(text, Contains("  pipeline 0 stage 0: tp 2 -> 1\n"));
  CHECK_THAT(text, Contains("  pipeline 0 stage 0: dp 1 -> 2\n"));
  CHECK_THAT(text, Contains("  pipeline 0 stage 2: recompute none -> full\n"));
  CHECK(d.changes.size() == 3);
}

TEST_CASE("diff: a stage on another subcluster, and devices within one") {
  Plan a = test::mixed_plan(), b = a;
  b.pipelines[0].stages[1].subcluster = "v100";
  b.pipelines[0].stages[1].devices = {{0, 1}, {0, 2}};
  b.pipelines[0].stages[2].devices = {{0, 3}};
  REQUIRE(validate_plan(b, "b").empty());
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  REQUIRE(d.changes.size() == 2);
  CHECK(d.changes[0].text ==
        "pipeline 0 stage 1 moved from subcluster a100 to v100 (devices a100 node 0: 2-3 -> v100 node 0: 1-2)");
  CHECK(d.changes[0].from == "a100");
  CHECK(d.changes[1].text == "pipeline 0 stage 2: devices v100 node 0: 0 -> v100 node 0: 3");
}

TEST_CASE("diff: warm-ups are compared when both plans give them") {
  Plan a = predicted(test::mixed_plan()), b = a;
  REQUIRE(a.pipelines[0].stages[0].warmup == 3);
  b.pipelines[0].stages[0].warmup = 2;
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  REQUIRE(d.changes.size() == 1);
  CHECK_THAT(d.changes[0].text, Catch::StartsWith("pipeline 0 stage 0: warm-ups 3 -> 2"));
  // A hand-written plan without warm-ups is not "different" for lacking the derived field.
  Plan c = a;
  c.pipelines[0].stages[0].warmup.reset();
  CHECK(review::diff_plans(a, c, "a.json", "c.json").changes.empty());
}

TEST_CASE("diff: micro-batch size and count, schedule, stages and pipelines added or removed") {
  Plan a = test::mixed_plan(), b = a;
  b.schedule = ScheduleKind::gpipe;
  b.pipelines[0].num_microbatches = 4;
  b.pipelines[0].micro_batch_size = 4;
  b.pipelines[0].stages.pop_back();
  b.pipelines.push_back(a.pipelines[0]);
  const std::string text = texts(review::diff_plans(a, b, "a.json", "b.json"));
  CHECK_THAT(text, Contains("  schedule 1f1b -> gpipe\n"));
  CHECK_THAT(text, Contains("  pipeline 0: micro-batch size 2 -> 4 sequences\n"));
  CHECK_THAT(text, Contains("  pipeline 0: micro-batches per iteration 8 -> 4\n"));
  CHECK_THAT(text, Contains("  pipeline 0 stage 2 removed: v100 node 0: 0, layers 4-5 (layer 3 .. head), tp 1, cp 1, dp 1"));
  CHECK_THAT(text, Contains("  pipeline 1 added: 8 micro-batches of 2, 3 stages: a100 node 0: 0-1, layers 0-1"));
}

TEST_CASE("diff: the embedded cluster is compared field by field") {
  Plan a = test::mixed_plan(), b = a;
  b.cluster.subclusters[1].device.memory /= 2;
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  REQUIRE(d.changes.size() == 1);
  CHECK(d.changes[0].field == "cluster.subclusters[1].device.memory");
  CHECK(d.changes[0].text == "cluster.subclusters[1].device.memory: \"16GiB\" -> \"8GiB\"");
}

TEST_CASE("diff: predicted metrics with their relative change, only when both plans have them") {
  Plan a = predicted(test::mixed_plan()), b = a;
  b.predicted->iteration_s = a.predicted->iteration_s * 0.9;
  b.pipelines[0].stages[2].predicted->memory_bytes *= 2;
  auto d = review::diff_plans(a, b, "a.json", "b.json");
  CHECK(d.changes.empty());
  REQUIRE(d.metrics.size() == 2);
  CHECK(d.metrics[0].metric == "iteration_s");
  CHECK(d.metrics[0].change == Approx(-0.1));
  CHECK_THAT(d.metrics[0].text, Catch::StartsWith("iteration ") && Contains(" (-10.0%)"));
  CHECK(d.metrics[1].metric == "memory_bytes");
  CHECK(d.metrics[1].pipeline == 0);
  CHECK(d.metrics[1].stage == 2);
  CHECK_THAT(d.metrics[1].text, Catch::StartsWith("pipeline 0 stage 2: peak memory per device ") && Contains("(+100.0%)"));
  CHECK_FALSE(d.same());

  auto half = review::diff_plans(a, test::mixed_plan(), "a.json", "b.json");
  CHECK(half.metrics.empty());
  CHECK(half.not_compared == "b.json has no predictions");
  CHECK(half.same());
}

TEST_CASE("diff: the json form has kind, pipeline, stage, field, from, to for every change") {
  Plan a = test::mixed_plan(), b = a;
  b.pipelines[0].stages[0].tp = 1;
  b.pipelines[0].stages[0].dp = 2;
  auto j = review::to_json(review::diff_plans(a, b, "a.json", "b.json"), "a.json", "b.json");
  CHECK(j["same"] == false);
  REQUIRE(j["changes"].size() == 2);
  CHECK(j["changes"][0]["kind"] == "changed");
  CHECK(j["changes"][0]["pipeline"] == 0);
  CHECK(j["changes"][0]["stage"] == 0);
  CHECK(j["changes"][0]["field"] == "tp");
  CHECK(j["changes"][0]["from"] == 2);
  CHECK(j["changes"][0]["to"] == 1);
  CHECK(j["metrics"].empty());
  CHECK(j["not_compared"] == "neither plan has predictions");
}

TEST_CASE("diff: devices are described as runs per node") {
  CHECK(review::describe_devices("a", {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 3}}) == "a node 0: 0-2, node 1: 0,3");
  CHECK(review::describe_devices("v100", {{0, 0}}) == "v100 node 0: 0");
}

TEST_CASE("check: an unchanged plan passes every rule with a one-line summary") {
  const Plan plan = predicted(test::mixed_plan());
  review::CheckRules rules;
  rules.baseline = review::Baseline{"base.json", plan};
  rules.max_iteration_s = plan.predicted->iteration_s * 1.01;
  auto r = review::check_plan(plan, "plan.json", {}, rules);
  REQUIRE(r);
  CHECK(r->ok());
  CHECK_THAT(r->summary, Catch::StartsWith("ok: plan.json: valid on demo-1x4a100-1x4v100; iteration ") &&
                             Contains("+0.0%, allowed +5.0%") && Contains("memory headroom at least"));
  CHECK(r->summary.find('\n') == std::string::npos);
}

TEST_CASE("check: a plan that no longer validates fails the valid rule, naming the stage") {
  Plan plan = test::mixed_plan();
  plan.cluster.subclusters[1].devices_per_node = 0;  // the v100 node lost its devices
  auto r = review::check_plan(plan, "plan.json", {}, {});
  REQUIRE(r);
  REQUIRE(r->violations.size() == 1);
  CHECK(r->violations[0].rule == "valid");
  CHECK(r->violations[0].pipeline == 0);
  CHECK(r->violations[0].stage == 2);
  CHECK_THAT(r->violations[0].message, Contains("pipelines[0].stages[2].devices[0]: device (node 0, device 0) does not exist"));
  CHECK_FALSE(r->outcome);
}

TEST_CASE("check: memory headroom below the minimum, and a stage that does not fit") {
  Plan plan = test::mixed_plan();
  review::CheckRules rules;
  rules.min_memory_headroom = 0.9999999;  // every stage of tiny-gpt uses some memory
  auto r = review::check_plan(plan, "plan.json", {}, rules);
  REQUIRE(r);
  REQUIRE(r->violations.size() == 3);
  CHECK(r->violations[2].rule == "memory");
  CHECK(r->violations[2].stage == 2);
  CHECK_THAT(r->violations[2].message, Catch::StartsWith("pipeline 0 stage 2 (v100 node 0: 0, V100-16GB): memory headroom "));

  plan.cluster.subclusters[1].device.memory = 1024;  // bytes: nothing fits
  auto small = review::check_plan(plan, "plan.json", {}, {});
  REQUIRE(small);
  REQUIRE(small->violations.size() == 1);
  CHECK_THAT(small->violations[0].message, Contains("pipeline 0 stage 2 (v100 node 0: 0, V100-16GB) does not fit: peak "));
}

TEST_CASE("check: a regression past the threshold fails and names the stage that slowed most") {
  const Plan plan = predicted(test::mixed_plan());
  Plan faster = plan;  // a baseline 20% faster, its stage 1 the one that was quicker
  faster.predicted->iteration_s /= 1.2;
  faster.pipelines[0].stages[1].predicted->forward_s /= 2;
  review::CheckRules rules;
  rules.baseline = review::Baseline{"base.json", faster};
  rules.max_regression = 0.1;
  auto r = review::check_plan(plan, "plan.json", {}, rules);
  REQUIRE(r);
  REQUIRE(r->violations.size() == 1);
  CHECK(r->violations[0].rule == "regression");
  CHECK(r->violations[0].stage == 1);
  CHECK_THAT(r->violations[0].message, Contains("(+20.0%) against the baseline base.json, more than the allowed +10.0%") &&
                                           Contains("slowed most: pipeline 0 stage 1 (a100 node 0: 2-3, A100-40GB)"));
  rules.max_regression = 0.25;
  CHECK(review::check_plan(plan, "plan.json", {}, rules)->ok());

  Plan unpredicted = test::mixed_plan();
  rules.baseline = review::Baseline{"old.json", unpredicted};
  auto none = review::check_plan(plan, "plan.json", {}, rules);
  REQUIRE_FALSE(none);
  CHECK(none.errors()[0].file == "old.json");
  CHECK(none.errors()[0].path == "predicted.iteration_s");
}

TEST_CASE("check: the maximum iteration time names the slowest stage") {
  const Plan plan = predicted(test::mixed_plan());
  review::CheckRules rules;
  rules.max_iteration_s = plan.predicted->iteration_s / 2;
  auto r = review::check_plan(plan, "plan.json", {}, rules);
  REQUIRE(r);
  REQUIRE(r->violations.size() == 1);
  CHECK(r->violations[0].rule == "iteration");
  CHECK(r->violations[0].stage.has_value());
  CHECK_THAT(r->violations[0].message, Contains("more than the maximum") && Contains("slowest stage: pipeline 0 stage "));
}

TEST_CASE("check: shares are written 5% or 0.05") {
  CHECK(*review::parse_share("5%", "--max-regression") == Approx(0.05));
  CHECK(*review::parse_share("0.05", "--max-regression") == Approx(0.05));
  CHECK(*review::parse_share("0", "--max-regression") == 0);
  CHECK(*review::parse_share("150%", "--max-regression") == Approx(1.5));
  for (const char* bad : {"5", "-1%", "abc", "", "5%%", "0.05x"}) {
    auto r = review::parse_share(bad, "--max-regression");
    INFO(bad);
    REQUIRE_FALSE(r);
    CHECK(r.errors()[0].path == "--max-regression");
  }
  CHECK_THAT(review::parse_share("5", "--x").errors()[0].message, Contains("write 5% for percent"));
}
