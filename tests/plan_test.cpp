#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "kept_plans.hpp"
#include "test_util.hpp"

using namespace het;

namespace {

// OPT-350M-shaped model (24 layers -> 26 units) on 4 A100 + 4 V100.
const char* kModel = R"(name: m
architecture: gpt
num_layers: 24
hidden_size: 1024
num_attention_heads: 16
vocab_size: 50272
seq_length: 2048
training: {global_batch_size: 64}
)";
const char* kCluster = R"(name: c
subclusters:
  - {name: a100, device: A100-40GB, nodes: 1, devices_per_node: 4}
  - {name: v100, device: V100-16GB, nodes: 1, devices_per_node: 4}
links:
  - {between: [a100, v100], bandwidth: 10Gbit/s, latency: 1ms}
)";
// Decision fields only: a100 runs embedding + layers 0..15 with dp 2 x tp 2, v100 the rest with dp 4.
const char* kDecisions = R"({
  "format": "hetplan.plan/v1",
  "schedule": {"kind": "1f1b"},
  "pipelines": [
    {"micro_batch_size": 4, "num_microbatches": 16,
     "stages": [
       {"subcluster": "a100", "layers": [0, 16], "tp": 2, "dp": 2,
        "devices": [{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 0, "device": 2}, {"node": 0, "device": 3}]},
       {"subcluster": "v100", "layers": [17, 25], "dp": 4, "recompute": "selective",
        "devices": [{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 0, "device": 2}, {"node": 0, "device": 3}]}
     ]}
  ]
}
)";

struct Specs {
  ModelSpec model;
  ClusterSpec cluster;
  Specs() {
    auto md = test::doc(kModel, "m.yaml");
    model = *read_model(md.file, md.root, "");
    auto cd = test::doc(kCluster, "c.yaml");
    cluster = *read_cluster(cd.file, cd.root, "", test::catalog());
  }
  PlanSpecs specs() const { return {&model, &cluster, &test::catalog()}; }
};

Result<Plan> read(const std::string& text, const PlanSpecs& specs) {
  return read_plan(test::doc(text, "plan.json"), specs);
}

// The plan with one textual replacement applied, read and validated; returns all problems.
std::string problems(std::string text, const std::string& from, const std::string& to) {
  Specs s;
  auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  auto plan = read(text, s.specs());
  if (!plan) return test::text(plan.errors());
  return test::text(validate_plan(*plan, "plan.json"));
}

}  // namespace

TEST_CASE("a hand-written plan with only decision fields is accepted with --model/--cluster") {
  Specs s;
  auto plan = read(kDecisions, s.specs());
  REQUIRE(plan.ok());
  CHECK(validate_plan(*plan, "plan.json").empty());
  REQUIRE(plan->pipelines.size() == 1);
  const auto& st = plan->pipelines[0].stages;
  CHECK(st[0].tp == 2);
  CHECK(st[0].cp == 1);  // default
  CHECK(st[1].recompute == Recompute::selective);
  CHECK(st[1].line == 9);
  CHECK_FALSE(st[0].warmup.has_value());
}

TEST_CASE("a plan without embedded specs and without --model/--cluster is refused clearly") {
  auto plan = read(kDecisions, PlanSpecs{nullptr, nullptr, &test::catalog()});
  REQUIRE_FALSE(plan.ok());
  auto msg = test::text(plan.errors());
  CHECK_THAT(msg, Catch::Contains("model: missing: a plan embeds its model, or give one with --model"));
  CHECK_THAT(msg, Catch::Contains("cluster: missing"));
}

TEST_CASE("a written plan embeds its specs and reads back identically") {
  Specs s;
  auto plan = read(kDecisions, s.specs());
  REQUIRE(plan.ok());
  plan->pipelines[0].stages[0].warmup = 2;
  plan->pipelines[0].stages[0].predicted = StagePrediction{0.01, 0.02, 12e9};
  plan->algorithm = AlgorithmInfo{"uniform", 0.5, 42, 1.25, 0.1, {{"uniform", 1.375, 0.5, 42}}};
  plan->profiles.push_back({"A100-40GB", std::string(64, 'a')});
  Prediction p;
  p.iteration_s = 3.5;
  p.per_stage = nlohmann::ordered_json::array({{{"stage", 0}, {"name", "s0"}, {"busy", 0.75}}});
  plan->predicted = p;
  std::string text = write_plan(*plan);
  test::keep_plan(text);
  auto back = read(text, PlanSpecs{nullptr, nullptr, &test::catalog()});  // self-contained: no specs given
  REQUIRE(back.ok());
  CHECK(validate_plan(*back, "plan.json").empty());
  CHECK(write_plan(*back) == text);
  CHECK(back->pipelines[0].stages[0].warmup == 2);
  CHECK(back->predicted->per_stage[0]["name"] == "s0");
}

TEST_CASE("the example plan in docs/plan-format.md is valid") {
  std::ifstream in(HET_SOURCE_DIR "/docs/plan-format.md");
  std::stringstream md;
  md << in.rdbuf();
  std::string doc = md.str();
  auto begin = doc.find("```json\n");
  REQUIRE(begin != std::string::npos);
  auto end = doc.find("```", begin + 8);
  std::string json = doc.substr(begin + 8, end - begin - 8);
  auto plan = read(json, PlanSpecs{nullptr, nullptr, &test::catalog()});
  INFO((plan ? std::string() : test::text(plan.errors())));
  REQUIRE(plan.ok());
  auto problems = validate_plan(*plan, "plan-format.md");
  INFO(test::text(problems));
  CHECK(problems.empty());
  CHECK(nlohmann::ordered_json::parse(json) == to_json(*plan));  // the example is exactly what hetplan writes
}

TEST_CASE("validation: device count must be dp*cp*tp") {
  CHECK_THAT(problems(kDecisions, R"("tp": 2, "dp": 2)", R"("tp": 2, "dp": 1)"),
             Catch::Contains("plan.json:7: pipelines[0].stages[0].devices: expected dp*cp*tp = 1*1*2 = 2 devices, got 4"));
}

TEST_CASE("validation: a device serves one stage") {
  std::string twice = R"([{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 0, "device": 1}, {"node": 0, "device": 3}])";
  CHECK_THAT(problems(kDecisions,
                      R"([{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 0, "device": 2}, {"node": 0, "device": 3}]},
       {"subcluster": "v100")",
                      twice + "},\n       {\"subcluster\": \"v100\""),
             Catch::Contains("pipelines[0].stages[0].devices[2]: device (node 0, device 1) of a100 is already used by "
                             "pipelines[0].stages[0] (line 7)"));
}

TEST_CASE("validation: devices must exist in the stage's subcluster") {
  CHECK_THAT(problems(kDecisions, R"({"node": 0, "device": 3}]},)", R"({"node": 1, "device": 3}]},)"),
             Catch::Contains("devices[3]: device (node 1, device 3) does not exist in subcluster a100 (1 nodes of 4 devices)"));
}

TEST_CASE("validation: stages cover the units without gap or overlap") {
  CHECK_THAT(problems(kDecisions, "[17, 25]", "[18, 25]"),
             Catch::Contains("pipelines[0].stages[1].layers: units 17..17 (layer 16) are not assigned to any stage"));
  CHECK_THAT(problems(kDecisions, "[17, 25]", "[16, 25]"),
             Catch::Contains("starts at unit 16 but units up to 16 belong to the previous stage"));
  CHECK_THAT(problems(kDecisions, "[17, 25]", "[17, 24]"),
             Catch::Contains("the last stage ends at unit 24 but the model's units run to 25 (head)"));
  CHECK_THAT(problems(kDecisions, "[17, 25]", "[17, 26]"),
             Catch::Contains("ends at unit 26 but the model has units 0..25"));
  CHECK_THAT(problems(kDecisions, "[17, 25]", "[25, 17]"), Catch::Contains("last unit 17 comes before first unit 25"));
}

TEST_CASE("validation: sharding degrees must divide heads, sequence and micro-batch") {
  CHECK_THAT(problems(kDecisions, R"("tp": 2, "dp": 2)", R"("tp": 2, "dp": 2, "cp": 3)"),
             Catch::Contains("cp 3 must divide seq_length 2048"));
  CHECK_THAT(problems(kDecisions, R"("micro_batch_size": 4, "num_microbatches": 16)",
                      R"("micro_batch_size": 2, "num_microbatches": 32)"),
             Catch::Contains("pipelines[0].stages[1].dp: dp 4 must divide the pipeline's micro_batch_size 2"));
}

TEST_CASE("validation: micro-batches must add up to the global batch") {
  CHECK_THAT(problems(kDecisions, R"("num_microbatches": 16)", R"("num_microbatches": 15)"),
             Catch::Contains("pipelines: micro_batch_size*num_microbatches summed over pipelines is 4*15 = 60, but the "
                             "model's global_batch_size is 64"));
}

TEST_CASE("validation: warm-up counts lie in [1, micro-batches]") {
  CHECK_THAT(problems(kDecisions, R"("layers": [0, 16],)", R"("layers": [0, 16], "warmup": 17,)"),
             Catch::Contains("warm-up count 17 must be between 1 and num_microbatches 16"));
  CHECK_THAT(problems(kDecisions, R"("layers": [0, 16],)", R"("layers": [0, 16], "warmup": 0,)"),
             Catch::Contains("warm-up count 0 must be between 1"));
}

TEST_CASE("validation: warm-up counts must not increase along a pipeline") {
  std::string text = problems(kDecisions, R"("layers": [17, 25],)", R"("layers": [17, 25], "warmup": 2,)");
  CHECK(text.empty());  // the first stage has none: nothing to compare
  std::string both = kDecisions;
  both.replace(both.find(R"("layers": [0, 16],)"), 18, R"("layers": [0, 16], "warmup": 1,)");
  CHECK_THAT(problems(both, R"("layers": [17, 25],)", R"("layers": [17, 25], "warmup": 2,)"),
             Catch::Contains("pipelines[0].stages[1].warmup: warm-up count 2 exceeds the previous stage's 1; the "
                             "schedule would deadlock"));
}

TEST_CASE("validation: the sublayer granularity doubles the layer units") {
  std::string text = kDecisions;
  text.replace(text.find("\"pipelines\""), 0, "\"granularity\": \"sublayer\",\n  ");
  CHECK_THAT(problems(text, "[17, 25]", "[17, 25]"), Catch::Contains("units run to 49 (head)"));
  CHECK(problems(text, "[17, 25]", "[17, 49]").empty());
  Specs s;
  CHECK(num_units(s.model, Granularity::sublayer) == 50);
  CHECK(unit_name(s.model, Granularity::sublayer, 17) == "attn 8");
  CHECK(unit_name(s.model, Granularity::sublayer, 18) == "mlp 8");
  CHECK(unit_name(s.model, Granularity::layer, 17) == "layer 16");
}
