#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "digest/digest.hpp"
#include "plan/plan_io.hpp"
#include "plan/profiles.hpp"
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
  auto a100 = load_profile_file(HET_SOURCE_DIR "/profiles/opt-350m/a100-40.profile.yaml");
  REQUIRE(a100.ok());
  plan->profiles.push_back(a100->profile);
  PlanProfile digest_only;  // a plan whose V100 profile was removed
  digest_only.device = "V100-16GB";
  digest_only.sha256 = std::string(64, 'a');
  plan->profiles.push_back(digest_only);
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
  // The embedded profile reads back to the file's costs, row for row.
  REQUIRE(back->profiles.size() == 2);
  REQUIRE(back->profiles[0].profile.has_value());
  const ProfileSpec& file = *a100->profile.profile;
  const ProfileSpec& embedded = *back->profiles[0].profile;
  CHECK(back->profiles[0].sha256 == a100->profile.sha256);
  REQUIRE(embedded.units.size() == file.units.size());
  REQUIRE(file.units.size() == 36);
  for (std::size_t i = 0; i < file.units.size(); ++i) {
    CHECK(embedded.units[i].forward == file.units[i].forward);
    CHECK(embedded.units[i].backward == file.units[i].backward);
    CHECK(embedded.units[i].activation_memory == file.units[i].activation_memory);
  }
  CHECK(embedded.optimizer_step == file.optimizer_step);
  CHECK_FALSE(back->profiles[1].profile.has_value());
  CHECK(back->profiles[1].document.is_null());
}

TEST_CASE("a profile file's digest is the SHA-256 of its bytes") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string path = HET_SOURCE_DIR "/profiles/opt-350m/v100-16.profile.yaml";
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto p = load_profile_file(path);
  REQUIRE(p.ok());
  CHECK(p->profile.sha256 == sha256_hex(bytes.str()));
  CHECK(p->profile.device == "V100-16GB");
  CHECK(p->profile.document["device"] == "V100-16GB");
  CHECK(p->profile.document["units"][0]["forward"].is_string());  // a quantity keeps its text
}

TEST_CASE("an embedded profile with a problem is reported at its line in the plan file") {
  Specs s;
  auto plan = read(kDecisions, s.specs());
  REQUIRE(plan.ok());
  auto a100 = load_profile_file(HET_SOURCE_DIR "/profiles/opt-350m/a100-40.profile.yaml");
  REQUIRE(a100.ok());
  plan->profiles.push_back(a100->profile);
  const std::string text = write_plan(*plan);
  REQUIRE(read(text, s.specs()).ok());

  // units[3].forward loses its unit.
  std::string bad = text;
  const std::string row3 = "\"forward\": \"685us\"";
  const auto at = bad.find(row3);
  REQUIRE(at != std::string::npos);
  bad.replace(at, row3.size(), "\"forward\": 685");
  const int line = 1 + static_cast<int>(std::count(bad.begin(), bad.begin() + static_cast<long>(at), '\n'));
  auto r = read(bad, s.specs());
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].file == "plan.json");
  CHECK(r.errors()[0].line == line);
  CHECK(r.errors()[0].path == "profiles[0].profile.units[3].forward");
  CHECK_THAT(r.errors()[0].message, Catch::Contains("685"));

  // The entry's device and the profile's disagree; the digest is not a SHA-256.
  std::string other = text;
  const std::string device = "\"device\": \"A100-40GB\"";
  other.replace(other.find(device), device.size(), "\"device\": \"H100\"");
  other.replace(other.find(a100->profile.sha256), 64, "abc");
  auto o = read(other, s.specs());
  REQUIRE_FALSE(o.ok());
  const std::string msg = test::text(o.errors());
  CHECK_THAT(msg, Catch::Contains("profiles[0].profile.device: the embedded profile is for A100-40GB, but "
                                  "profiles[0].device says H100"));
  CHECK_THAT(msg, Catch::Contains("profiles[0].sha256: expected the SHA-256 of the profile file as 64 lowercase hex"));
}

TEST_CASE("choose_profiles: given files replace the plan's, digests without content are unavailable") {
  Specs s;
  Plan plan = *read(kDecisions, s.specs());
  auto load = [](const std::string& name) {
    auto p = load_profile_file(HET_SOURCE_DIR + std::string("/") + name);
    REQUIRE(p.ok());
    return *p;
  };
  const ProfileFile a100 = load("profiles/opt-350m/a100-40.profile.yaml");
  const ProfileFile v100 = load("profiles/opt-350m/v100-16.profile.yaml");
  const ProfileFile docs_a100 = load("docs/examples/a100-opt-350m.profile.yaml");
  const ProfileFile rtx = load("profiles/opt-350m/rtx-3090.profile.yaml");  // no such device in the cluster
  REQUIRE(docs_a100.profile.device == "A100-40GB");
  REQUIRE(docs_a100.profile.sha256 != a100.profile.sha256);
  auto choose = [&](const std::vector<ProfileFile>& given) {
    auto c = choose_profiles(plan, given, "the model (m.yaml)");
    REQUIRE(c.ok());
    return *c;
  };

  // Searching: the given ones for the cluster's device types, in its order.
  auto searched = choose({rtx, v100, a100});
  REQUIRE(searched.used.size() == 2);
  CHECK(searched.used[0].sha256 == a100.profile.sha256);
  CHECK(searched.used[1].sha256 == v100.profile.sha256);
  CHECK(searched.notes.empty());
  CHECK(searched.unavailable.empty());
  CHECK(searched.specs().size() == 2);

  // The plan embeds the a100 profile and names the v100 one by its digest only.
  plan.profiles = {a100.profile, v100.profile};
  plan.profiles[1].document = nullptr;
  plan.profiles[1].profile.reset();
  auto alone = choose({});
  REQUIRE(alone.used.size() == 1);
  CHECK(alone.used[0].sha256 == a100.profile.sha256);
  REQUIRE(alone.unavailable.size() == 1);
  CHECK(alone.unavailable[0].device == "V100-16GB");
  CHECK(unavailable_sentence(alone.unavailable[0]) ==
        "the plan was predicted with a profile for V100-16GB (sha256 " + v100.profile.sha256 +
            ") that is not available (neither embedded in the plan nor given with --profile); its costs are now analytic");

  // Given files: the v100 one fills the gap silently (same digest), another a100 one replaces
  // the plan's and a note says so; the last given file for a device type wins.
  auto given = choose({a100, docs_a100, v100});
  CHECK(given.unavailable.empty());
  REQUIRE(given.used.size() == 2);
  CHECK(given.used[0].sha256 == docs_a100.profile.sha256);
  REQUIRE(given.notes.size() == 1);
  CHECK(given.notes[0] == "profile for A100-40GB: " + docs_a100.file + " (sha256 " + docs_a100.profile.sha256 +
                              "), replacing the plan's (sha256 " + a100.profile.sha256 + ")");

  // A given profile of another model shape is refused, naming the field; the plan's own
  // embedded one of another shape (the model replaced) is not used, with a note.
  ProfileFile wide = a100;
  wide.profile.profile->model.hidden_size = 2048;
  auto refused = choose_profiles(plan, {wide}, "the model (m.yaml)");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.errors()[0].path == "model.hidden_size");
  CHECK_THAT(refused.errors()[0].message, Catch::Contains("hidden_size 2048, but the model (m.yaml) has 1024"));
  Plan embedded_wide = plan;
  embedded_wide.profiles[0] = wide.profile;
  auto shaped = choose_profiles(embedded_wide, {}, "the model (m.yaml)");
  REQUIRE(shaped.ok());
  CHECK(shaped->used.empty());
  REQUIRE(shaped->notes.size() == 1);
  CHECK_THAT(shaped->notes[0], Catch::StartsWith("the plan's profile for A100-40GB not used: "));

  // A plan from before profiles were embedded: its prediction says v100 came from a profile.
  plan.profiles.clear();
  plan.predicted = Prediction{};
  plan.predicted->per_stage = nlohmann::ordered_json::array(
      {{{"subcluster", "a100"}, {"source", "analytic"}}, {{"subcluster", "v100"}, {"source", "interpolated"}}});
  auto legacy = choose({});
  REQUIRE(legacy.unavailable.size() == 1);
  CHECK(legacy.unavailable[0].device == "V100-16GB");
  CHECK(legacy.unavailable[0].sha256.empty());
  CHECK(choose({v100}).unavailable.empty());
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
