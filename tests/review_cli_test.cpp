// `hetplan diff` and `hetplan check` as users run them: real processes on plans that
// `hetplan search` and `hetplan simulate` wrote from shipped configs, edited as a reviewer
// or a changed cluster would edit them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "process.hpp"

using het::test::run_process;
using Catch::Contains;
using Json = nlohmann::ordered_json;

namespace {

const std::string kSrc = HET_SOURCE_DIR;
const std::string kModel = kSrc + "/configs/models/opt-350m.yaml";
const std::string kCluster = kSrc + "/configs/clusters/demo-1x4a100-1x4v100.yaml";
const std::vector<std::string> kProfiles = {kSrc + "/profiles/opt-350m/a100-40.profile.yaml",
                                            kSrc + "/profiles/opt-350m/v100-16.profile.yaml"};

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

void write_json(const std::string& path, const Json& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> with_profiles(std::vector<std::string> args) {
  for (const auto& p : kProfiles) args.insert(args.end(), {"--profile", p});
  return args;
}

// A plan from `hetplan search` on OPT-350M and the demo cluster with the shipped profiles
// (uniform: stage 0 on the a100s, units 0-12, stage 1 on the v100s, units 13-25), and
// edited copies of it, predicted again as a user would after editing.
struct SearchedPlan {
  het::test::TempDir dir;
  std::string base = dir.path() + "/base.json";

  SearchedPlan() {
    auto r = run_process(with_profiles({HETPLAN_BIN, "search", "--model", kModel, "--cluster", kCluster, "--algo",
                                        "uniform", "--time-budget", "10", "-o", base}));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const Json j = read_json(base);
    REQUIRE(j["pipelines"].size() == 1);
    REQUIRE(j["pipelines"][0]["stages"].size() == 2);
    REQUIRE(j["pipelines"][0]["stages"][0]["layers"] == Json{0, 12});
    REQUIRE(j["pipelines"][0]["stages"][0]["subcluster"] == "a100");
  }

  // The base plan with `edit` applied, then `hetplan simulate`d (extra arguments go to it).
  std::string edited(const std::string& name, const std::function<void(Json&)>& edit,
                     const std::vector<std::string>& extra = {}) {
    Json j = read_json(base);
    edit(j);
    const std::string path = dir.path() + "/" + name;
    write_json(path, j);
    std::vector<std::string> args = with_profiles({HETPLAN_BIN, "simulate", path, "-o", path});
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_process(args);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    return path;
  }
};

het::test::ProcessResult diff(const std::string& a, const std::string& b, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {HETPLAN_BIN, "diff", a, b};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_process(args);
}

std::string percent(double from, double to) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "(%+.1f%%)", 100 * (to / from - 1));
  return buf;
}

}  // namespace

TEST_CASE("hetplan diff of a plan with itself prints one same line and exits 0") {
  SearchedPlan plans;
  auto r = diff(plans.base, plans.base);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(lines(r.out) == std::vector<std::string>{"same: " + plans.base + " and " + plans.base + " are the same plan"});
  CHECK(r.err.empty());
  // A plan that only went through simulate again is still the same plan.
  auto again = diff(plans.base, plans.edited("again.json", [](Json&) {}));
  CHECK(again.exit_code == 0);
  CHECK(lines(again.out).size() == 1);
}

TEST_CASE("hetplan diff names a moved layer boundary, and the iteration change with its percentage") {
  SearchedPlan plans;
  const std::string b = plans.edited("boundary.json", [](Json& j) {
    j["pipelines"][0]["stages"][0]["layers"] = {0, 10};
    j["pipelines"][0]["stages"][1]["layers"] = {11, 25};
  });
  auto r = diff(plans.base, b);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 0: layers 0-12 -> 0-10 (boundary moved by 2 units: gives layer 10 .. "
                             "layer 11 to stage 1)\n"));
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 1: layers 13-25 -> 11-25 (boundary moved by 2 units: takes layer 10 "
                             ".. layer 11 from stage 0)\n"));
  const double before = read_json(plans.base)["predicted"]["iteration_s"];
  const double after = read_json(b)["predicted"]["iteration_s"];
  REQUIRE(before != after);
  CHECK_THAT(r.out, Contains("  iteration ") && Contains(percent(before, after) + "\n"));
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 1: peak memory per device "));
}

TEST_CASE("hetplan diff names a changed tp") {
  SearchedPlan plans;
  const std::string b = plans.edited("tp.json", [](Json& j) {
    j["pipelines"][0]["stages"][0]["tp"] = 2;
    j["pipelines"][0]["stages"][0]["dp"] = 2;
  });
  auto r = diff(plans.base, b);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 0: tp 1 -> 2\n") && Contains("  pipeline 0 stage 0: dp 4 -> 2\n"));
}

TEST_CASE("hetplan diff names a stage moved to another subcluster, with its devices") {
  SearchedPlan plans;
  const std::string b = plans.edited("swap.json", [](Json& j) {
    j["pipelines"][0]["stages"][0]["subcluster"] = "v100";
    j["pipelines"][0]["stages"][1]["subcluster"] = "a100";
  });
  auto r = diff(plans.base, b);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 0 moved from subcluster a100 to v100 (devices a100 node 0: 0-3 -> v100 "
                             "node 0: 0-3)\n"));
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 1 moved from subcluster v100 to a100"));
}

TEST_CASE("hetplan diff names changed warm-ups when the schedule changes") {
  SearchedPlan plans;
  const Json base = read_json(plans.base);
  const int before = base["pipelines"][0]["stages"][0]["warmup"];
  // Two stages: 1f1b runs 2 warm-ups on stage 0, eager-1f1b 3, h-1f1b here 3 (gpipe's are
  // capped by memory at the base's). The search picks 1f1b where h-1f1b simulates no faster.
  const std::string kind = base["schedule"]["kind"], other = kind == "1f1b" ? "eager-1f1b" : "1f1b";
  const std::string b = plans.edited("other.json", [](Json&) {}, {"--schedule", other});
  const int after = read_json(b)["pipelines"][0]["stages"][0]["warmup"];
  REQUIRE(before != after);
  auto r = diff(plans.base, b);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("  schedule " + kind + " -> " + other + "\n"));
  CHECK_THAT(r.out, Contains("  pipeline 0 stage 0: warm-ups " + std::to_string(before) + " -> " + std::to_string(after)));
}

TEST_CASE("hetplan diff names a different micro-batch count and size") {
  SearchedPlan plans;
  const std::string b = plans.edited("mb.json", [](Json& j) {
    j["pipelines"][0]["micro_batch_size"] = 16;
    j["pipelines"][0]["num_microbatches"] = 64;
  });
  auto r = diff(plans.base, b);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("  pipeline 0: micro-batches per iteration 128 -> 64\n"));
  CHECK_THAT(r.out, Contains("  pipeline 0: micro-batch size 8 -> 16 sequences\n"));
}

TEST_CASE("hetplan diff --format json lists the changes and the metric deltas") {
  SearchedPlan plans;
  const std::string b = plans.edited("tp.json", [](Json& j) {
    j["pipelines"][0]["stages"][0]["tp"] = 2;
    j["pipelines"][0]["stages"][0]["dp"] = 2;
  });
  auto r = diff(plans.base, b, {"--format", "json"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  const Json j = Json::parse(r.out);
  CHECK(j["same"] == false);
  REQUIRE(j["changes"].size() == 2);
  CHECK(j["changes"][0] == Json{{"kind", "changed"}, {"pipeline", 0}, {"stage", 0}, {"field", "tp"}, {"from", 1},
                                {"to", 2}, {"text", "pipeline 0 stage 0: tp 1 -> 2"}});
  CHECK(j["changes"][1]["field"] == "dp");
  const double before = read_json(plans.base)["predicted"]["iteration_s"];
  const double after = read_json(b)["predicted"]["iteration_s"];
  bool found = false;
  for (const auto& m : j["metrics"])
    if (m["metric"] == "iteration_s") {
      found = true;
      CHECK(m["pipeline"].is_null());
      CHECK(m["from"].get<double>() == before);
      CHECK(m["to"].get<double>() == after);
      CHECK(m["change"].get<double>() == Approx(after / before - 1));
    }
  CHECK(found);
  CHECK(j["not_compared"].is_null());
  auto same = diff(plans.base, plans.base, {"--format", "json"});
  CHECK(same.exit_code == 0);
  CHECK(Json::parse(same.out)["same"] == true);
}

TEST_CASE("hetplan diff of hand-written plans compares their structure, --simulate adds the metrics") {
  het::test::TempDir dir;
  const std::string a = kSrc + "/tests/data/plans/mixed.plan.json";
  Json j = read_json(a);
  j["pipelines"][0]["stages"][2]["recompute"] = "full";
  const std::string b = dir.path() + "/b.json";
  write_json(b, j);
  const std::vector<std::string> specs = {"--model", kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster};
  auto r = diff(a, b, specs);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK(lines(r.out) == std::vector<std::string>{
                            a + " -> " + b + ": 1 change, 0 predicted metrics differ",
                            "  pipeline 0 stage 2: recompute none -> full",
                            "  predictions not compared: neither plan has predictions (--simulate predicts both)"});
  std::vector<std::string> simulate = specs;
  simulate.push_back("--simulate");
  auto s = diff(a, b, simulate);
  INFO(s.out << s.err);
  CHECK(s.exit_code == 1);
  CHECK_THAT(s.out, Contains("  pipeline 0 stage 2: recompute none -> full\n") &&
                        Contains("  pipeline 0 stage 2: backward per micro-batch "));
  CHECK_THAT(s.out, !Contains("not compared"));
  auto same = diff(a, a, simulate);
  CHECK(same.exit_code == 0);
}

TEST_CASE("hetplan diff of an unreadable or invalid plan exits 2 naming the file, line and field") {
  SearchedPlan plans;
  auto missing = diff(plans.base, plans.dir.path() + "/nothing.json");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("nothing.json") && Contains("cannot open"));

  Json j = read_json(plans.base);
  j["pipelines"][0]["stages"][1]["tp"] = "two";
  const std::string typo = plans.dir.path() + "/typo.json";
  write_json(typo, j);
  auto t = diff(plans.base, typo);
  INFO(t.err);
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.err, Contains("typo.json:") && Contains(": pipelines[0].stages[1].tp: expected a whole number"));
  CHECK(t.out.empty());

  j = read_json(plans.base);
  j["pipelines"][0]["stages"][1]["layers"] = {14, 25};  // unit 13 is in no stage
  const std::string gap = plans.dir.path() + "/gap.json";
  write_json(gap, j);
  auto g = diff(gap, plans.base);
  CHECK(g.exit_code == 2);
  CHECK_THAT(g.err, Contains("gap.json:") && Contains("pipelines[0].stages[1].layers: units 13..13"));
}

namespace {

// The docs' example plan predicted with the docs' example A100 profile (its a100 stage is
// the bottleneck), and a profile of the same shape whose measured costs are 30% slower.
struct CheckedPlan {
  het::test::TempDir dir;
  std::string base = dir.path() + "/base.json";
  std::string profile = kSrc + "/docs/examples/a100-opt-350m.profile.yaml";
  std::string slow = dir.write("slow.profile.yaml", R"(format: hetplan.profile/v1
device: A100-40GB
model: {architecture: gpt, hidden_size: 1024, num_attention_heads: 16, seq_length: 2048}
units:  # docs/examples/a100-opt-350m.profile.yaml with every time 1.3x
  - {unit: layer, tp: 1, cp: 1, micro_batch_size: 1, forward: 2.47ms, backward: 4.42ms,
     recompute: 2.47ms, activation_memory: 344MiB, parameter_memory: 48MiB}
  - {unit: layer, tp: 2, cp: 1, micro_batch_size: 1, forward: 1.43ms, backward: 2.47ms,
     recompute: 1.43ms, activation_memory: 190MiB, parameter_memory: 24MiB}
  - {unit: embedding, tp: 1, cp: 1, micro_batch_size: 1, forward: 1.04ms, backward: 0.013ms}
  - {unit: head, tp: 1, cp: 1, micro_batch_size: 1, forward: 2.73ms, backward: 5.2ms}
optimizer_step:
  - {tp: 1, time: 3.9ms}
  - {tp: 2, time: 1.95ms}
)");

  CheckedPlan() {
    auto r = run_process({HETPLAN_BIN, "simulate", kSrc + "/docs/examples/opt-350m-demo.plan.json", "--profile",
                          profile, "-o", base});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
  }

  het::test::ProcessResult check(std::vector<std::string> extra) const {
    std::vector<std::string> args = {HETPLAN_BIN, "check", base};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args);
  }

  // The demo cluster with the v100 subcluster's line replaced.
  std::string cluster(const std::string& name, const std::string& v100_device, int v100_devices) const {
    return dir.write(name, "name: demo-1x4a100-1x4v100\nsubclusters:\n"
                           "  - {name: a100, device: A100-40GB, nodes: 1, devices_per_node: 4}\n"
                           "  - {name: v100, device: " + v100_device + ", nodes: 1, devices_per_node: " +
                               std::to_string(v100_devices) + "}\n"
                           "links:\n  - {between: [a100, v100], bandwidth: 2.4GB/s, latency: 100us}\n");
  }
};

}  // namespace

TEST_CASE("hetplan check passes an unchanged plan with one ok line") {
  CheckedPlan c;
  auto r = c.check({"--baseline", c.base, "--max-regression", "5%", "--min-memory-headroom", "10%", "--profile", c.profile,
                    "--cluster", c.cluster("same.yaml", "V100-16GB", 4)});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  REQUIRE(lines(r.out).size() == 1);
  CHECK_THAT(r.out, Catch::StartsWith("ok: " + c.base + ": valid on demo-1x4a100-1x4v100; iteration ") &&
                        Contains("+0.0%, allowed +5.0%"));
  CHECK(r.err.empty());
}

TEST_CASE("hetplan check fails a plan that a slower profile makes 10% slower than its baseline, naming the stage") {
  CheckedPlan c;
  auto r = c.check({"--baseline", c.base, "--max-regression", "10%", "--profile", c.slow});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  const auto out = lines(r.out);
  REQUIRE(out.size() == 2);
  CHECK_THAT(out[0], Catch::StartsWith("regression: iteration ") && Contains("more than the allowed +10.0%") &&
                         Contains("slowed most: pipeline 0 stage 0 (a100 node 0: 0-3, A100-40GB)"));
  CHECK_THAT(out[1], Catch::StartsWith("FAILED: " + c.base + ": 1 violation (regression)"));
  // The same threshold as a fraction; and the baseline's own profile passes it.
  CHECK(c.check({"--baseline", c.base, "--max-regression", "0.1", "--profile", c.slow}).exit_code == 1);
  CHECK(c.check({"--baseline", c.base, "--max-regression", "0.1", "--profile", c.profile}).exit_code == 0);

  auto j = c.check({"--baseline", c.base, "--profile", c.slow, "--format", "json"});
  CHECK(j.exit_code == 1);
  const Json report = Json::parse(j.out);
  CHECK(report["ok"] == false);
  REQUIRE(report["violations"].size() == 1);
  CHECK(report["violations"][0]["rule"] == "regression");
  CHECK(report["violations"][0]["pipeline"] == 0);
  CHECK(report["violations"][0]["stage"] == 0);
  CHECK(report["iteration_s"].get<double>() > 1.1 * read_json(c.base)["predicted"]["iteration_s"].get<double>());
}

TEST_CASE("hetplan check fails a plan on a cluster whose devices shrank, naming the stage and devices") {
  CheckedPlan c;
  auto small = c.check({"--profile", c.profile, "--cluster", c.cluster("small.yaml", "{type: V100-16GB, memory: 2GiB}", 4)});
  INFO(small.out << small.err);
  CHECK(small.exit_code == 1);
  CHECK_THAT(small.out, Catch::StartsWith("memory: pipeline 0 stage 1 (v100 node 0: 0-3, V100-16GB) does not fit: peak ") &&
                            Contains("usable capacity 1.00 GiB"));

  auto fewer = c.check({"--profile", c.profile, "--cluster", c.cluster("fewer.yaml", "V100-16GB", 2)});
  INFO(fewer.out << fewer.err);
  CHECK(fewer.exit_code == 1);
  const auto out = lines(fewer.out);
  REQUIRE(out.size() == 3);
  CHECK_THAT(out[0], Catch::StartsWith("valid: not valid on cluster demo-1x4a100-1x4v100: " + c.base + ":") &&
                         Contains("pipelines[0].stages[1].devices[2]: device (node 0, device 2) does not exist in subcluster v100"));
  CHECK_THAT(out[1], Contains("pipelines[0].stages[1].devices[3]: device (node 0, device 3)"));
  CHECK_THAT(out[2], Catch::StartsWith("FAILED: " + c.base + ": not valid (2 problems), not simulated"));
}

TEST_CASE("hetplan check fails a plan edited by hand into an invalid one, naming the stage") {
  CheckedPlan c;
  Json j = read_json(c.base);
  j["pipelines"][0]["stages"][0]["tp"] = 2;  // 4 devices no longer make dp*tp = 8
  const std::string edited = c.dir.path() + "/edited.json";
  write_json(edited, j);
  auto r = run_process({HETPLAN_BIN, "check", edited, "--profile", c.profile});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Catch::StartsWith("valid: ") &&
                        Contains("pipelines[0].stages[0].devices: expected dp*cp*tp = 4*1*2 = 8 devices, got 4"));
}

TEST_CASE("hetplan check holds the memory headroom and the maximum iteration time") {
  CheckedPlan c;
  // The V100 stage keeps 70.8% of its 15 GiB, the A100 stage 78.1% of its 39 GiB.
  auto r = c.check({"--profile", c.profile, "--min-memory-headroom", "75%", "--max-iteration-s", "1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.out, Contains("memory: pipeline 0 stage 1 (v100 node 0: 0-3, V100-16GB): memory headroom ") &&
                        Contains("below the minimum 75.0%"));
  CHECK_THAT(r.out, Contains("iteration: predicted ") && Contains("more than the maximum 1.00 s"));
  CHECK_THAT(r.out, !Contains("memory: pipeline 0 stage 0"));
  CHECK(c.check({"--profile", c.profile, "--min-memory-headroom", "0.2", "--max-iteration-s", "1000"}).exit_code == 0);
}

TEST_CASE("hetplan check of unreadable input or bad thresholds exits 2 with a message") {
  CheckedPlan c;
  Json j = read_json(c.base);
  j["pipelines"][0]["stages"][0]["tp"] = "two";
  const std::string typo = c.dir.path() + "/typo.json";
  write_json(typo, j);
  auto t = run_process({HETPLAN_BIN, "check", typo});
  CHECK(t.exit_code == 2);
  CHECK_THAT(t.err, Contains("typo.json:") && Contains("pipelines[0].stages[0].tp: expected a whole number"));

  auto missing = run_process({HETPLAN_BIN, "check", c.dir.path() + "/nothing.json"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("nothing.json"));

  auto share = c.check({"--baseline", c.base, "--max-regression", "5"});
  CHECK(share.exit_code == 2);
  CHECK_THAT(share.err, Contains("--max-regression: expected a share like 5% or 0.05, got '5'"));

  auto lonely = c.check({"--max-regression", "5%"});
  CHECK(lonely.exit_code == 2);
  CHECK_THAT(lonely.err, Contains("--baseline"));

  // A baseline without a prediction has nothing to compare with.
  auto bare = c.check({"--baseline", kSrc + "/docs/examples/opt-350m-demo.plan.json"});
  CHECK(bare.exit_code == 2);
  CHECK_THAT(bare.err, Contains("opt-350m-demo.plan.json: predicted.iteration_s: the baseline has no predicted iteration time"));

  auto profile = c.check({"--profile", c.dir.write("bad.profile.yaml", "format: hetplan.profile/v1\ndevice: A100-40GB\n")});
  CHECK(profile.exit_code == 2);
  CHECK_THAT(profile.err, Contains("bad.profile.yaml"));
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The line of `out` that starts with `prefix` ("" when none).
std::string line_starting(const std::string& out, const std::string& prefix) {
  for (const auto& l : lines(out))
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

// What `sha256sum FILE` prints for the file.
std::string sha256sum(const std::string& file) {
  const std::string tool = het::test::find_program("sha256sum");
  REQUIRE_FALSE(tool.empty());
  auto r = run_process({tool, file});
  REQUIRE(r.exit_code == 0);
  return r.out.substr(0, 64);
}

// A plan from `hetplan search` with the shipped OPT-350M profiles of the demo cluster's two
// device types, with what the search printed, and copies of it edited by hand.
struct ProfiledPlan {
  het::test::TempDir dir;
  std::string plan = dir.path() + "/plan.json";
  std::string search_out;
  double iteration_s = 0;

  ProfiledPlan() {
    auto r = run_process(with_profiles({HETPLAN_BIN, "search", "--model", kModel, "--cluster", kCluster, "--algo",
                                        "uniform", "--time-budget", "10", "-o", plan}));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    search_out = r.out;
    iteration_s = read_json(plan)["predicted"]["iteration_s"];
  }

  std::string edited(const std::string& name, const std::function<void(Json&)>& edit) const {
    Json j = read_json(plan);
    edit(j);
    const std::string path = dir.path() + "/" + name;
    write_json(path, j);
    return path;
  }

  het::test::ProcessResult run(std::vector<std::string> args) const {
    args.insert(args.begin(), HETPLAN_BIN);
    return run_process(args);
  }
};

// The profiles' content removed, their digests kept.
void strip_profiles(Json& j) {
  for (auto& p : j["profiles"]) p.erase("profile");
}

}  // namespace

TEST_CASE("a plan searched with profiles embeds them: simulate, show and check on the plan alone reproduce the search") {
  ProfiledPlan p;
  const Json j = read_json(p.plan);
  REQUIRE(j["profiles"].size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const Json& entry = j["profiles"][i];
    const std::string file = kProfiles[i];  // a100-40 (the cluster's first device type), v100-16
    CHECK(entry["device"] == (i == 0 ? "A100-40GB" : "V100-16GB"));
    CHECK(entry["sha256"] == sha256sum(file));
    CHECK(entry["profile"]["format"] == "hetplan.profile/v1");
    CHECK(entry["profile"]["device"] == entry["device"]);
    const std::string text = read_text(file);
    std::size_t rows = 0;
    for (std::size_t at = text.find("\n  - {unit:"); at != std::string::npos; at = text.find("\n  - {unit:", at + 1)) ++rows;
    CHECK(entry["profile"]["units"].size() == rows);
  }

  const std::string searched = line_starting(p.search_out, "iteration ");
  REQUIRE_FALSE(searched.empty());
  auto show = p.run({"show", p.plan});
  INFO(show.out << show.err);
  CHECK(show.exit_code == 0);
  CHECK(line_starting(show.out, "iteration ") == searched);
  CHECK_THAT(show.out, !Contains("note:"));

  auto simulate = p.run({"simulate", p.plan, "--format", "json"});
  REQUIRE(simulate.exit_code == 0);
  const Json again = Json::parse(simulate.out);
  CHECK(again["predicted"]["iteration_s"].get<double>() == p.iteration_s);
  CHECK(again["profiles"] == j["profiles"]);
  auto table = p.run({"simulate", p.plan});
  CHECK(line_starting(table.out, "iteration ") == searched);

  auto check = p.run({"check", p.plan, "--format", "json"});
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
  CHECK(Json::parse(check.out)["iteration_s"].get<double>() == p.iteration_s);
  CHECK(check.err.empty());
  // The maximum holds against the profiled prediction, on either side of it.
  CHECK(p.run({"check", p.plan, "--max-iteration-s", std::to_string(p.iteration_s * 0.99)}).exit_code == 1);
  CHECK(p.run({"check", p.plan, "--max-iteration-s", std::to_string(p.iteration_s * 1.01)}).exit_code == 0);

  auto d = p.run({"diff", p.plan, p.plan, "--simulate"});
  CHECK(d.exit_code == 0);
  CHECK(lines(d.out).size() == 1);
}

TEST_CASE("hetplan check fails a plan whose profiles were removed, naming the devices, instead of passing on analytic costs") {
  ProfiledPlan p;
  const Json searched = read_json(p.plan);
  const std::string a100 = searched["profiles"][0]["sha256"], v100 = searched["profiles"][1]["sha256"];
  const std::string stripped = p.edited("stripped.json", strip_profiles);

  // On analytic costs the plan is several times faster than searched.
  auto simulate = p.run({"simulate", stripped, "--format", "json"});
  REQUIRE(simulate.exit_code == 0);
  const double analytic = Json::parse(simulate.out)["predicted"]["iteration_s"];
  REQUIRE(analytic < 0.5 * p.iteration_s);
  CHECK(Json::parse(simulate.out)["profiles"].empty());  // what it was predicted with now
  CHECK_THAT(simulate.err, Contains("note: the plan was predicted with a profile for A100-40GB (sha256 " + a100 +
                                    ") that is not available (neither embedded in the plan nor given with --profile)"));

  auto show = p.run({"show", stripped});
  CHECK(show.exit_code == 0);
  CHECK_THAT(show.out, Contains("note: the plan was predicted with a profile for A100-40GB (sha256 " + a100 +
                                ") that is not available") &&
                           Contains("note: the plan was predicted with a profile for V100-16GB (sha256 " + v100 + ")"));

  // A maximum the analytic costs meet and the searched prediction does not.
  const std::string max = std::to_string((analytic + p.iteration_s) / 2);
  auto check = p.run({"check", stripped, "--max-iteration-s", max});
  INFO(check.out << check.err);
  CHECK(check.exit_code == 1);
  const auto out = lines(check.out);
  REQUIRE(out.size() == 3);
  CHECK_THAT(out[0], Catch::StartsWith("profiles: the plan was predicted with a profile for A100-40GB (sha256 " + a100 +
                                       ") that is not available"));
  CHECK_THAT(out[1], Catch::StartsWith("profiles: the plan was predicted with a profile for V100-16GB (sha256 " + v100));
  CHECK_THAT(out[2], Catch::StartsWith("FAILED: " + stripped + ": 2 violations (profiles)"));

  // Given back, the profiles reproduce the search, and the maximum fails on its own terms.
  auto given = p.run(with_profiles({"check", stripped, "--max-iteration-s", max, "--format", "json"}));
  CHECK(given.exit_code == 1);
  const Json report = Json::parse(given.out);
  CHECK(report["iteration_s"].get<double>() == p.iteration_s);
  REQUIRE(report["violations"].size() == 1);
  CHECK(report["violations"][0]["rule"] == "iteration");

  // A plan written before plans embedded profiles (no digests): its recorded prediction says.
  const std::string legacy = p.edited("legacy.json", [](Json& j) { j["profiles"] = Json::array(); });
  auto old = p.run({"check", legacy, "--max-iteration-s", max});
  CHECK(old.exit_code == 1);
  CHECK_THAT(old.out, Contains("profiles: the plan's recorded prediction costed A100-40GB from a profile that the plan "
                               "does not record and no --profile gives"));

  // validate: the plan itself is valid, with a warning at the entry's line.
  auto validate = p.run({"validate", "--plan", stripped});
  CHECK(validate.exit_code == 0);
  const std::string text = read_text(stripped);
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(text.find("\"profiles\"")), '\n')) + 1;
  CHECK_THAT(validate.err, Contains("warning: " + stripped + ":" + std::to_string(line) +
                                    ": profiles[0]: the plan was predicted with a profile for A100-40GB"));
  CHECK(p.run(with_profiles({"validate", "--plan", stripped})).err.empty());
}

TEST_CASE("a --profile replaces a plan's embedded profile for its device type, changes the prediction and says so") {
  ProfiledPlan p;
  const std::string a100 = read_json(p.plan)["profiles"][0]["sha256"];
  // The shipped A100 profile with its microsecond times 10x.
  std::string text = read_text(kProfiles[0]);
  for (std::size_t at = text.find("us,"); at != std::string::npos; at = text.find("us,", at + 4)) text.insert(at, "0");
  const std::string slow = p.dir.write("slow.profile.yaml", text);
  const std::string slow_sha = sha256sum(slow);
  const std::string note = "note: profile for A100-40GB: " + slow + " (sha256 " + slow_sha + "), replacing the plan's (sha256 " + a100 + ")";

  const std::string replaced = p.dir.path() + "/replaced.json";
  auto r = p.run({"simulate", p.plan, "--profile", slow, "-o", replaced});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains(note + "\n"));
  const Json j = read_json(replaced);
  const double slower = j["predicted"]["iteration_s"];
  CHECK(slower > 1.5 * p.iteration_s);
  CHECK(j["profiles"][0]["sha256"] == slow_sha);  // the written plan records what predicted it
  CHECK(j["profiles"][1]["sha256"] == read_json(p.plan)["profiles"][1]["sha256"]);
  auto alone = p.run({"simulate", replaced, "--format", "json"});
  CHECK(Json::parse(alone.out)["predicted"]["iteration_s"].get<double>() == slower);

  auto check = p.run({"check", p.plan, "--profile", slow});
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.err, Contains(note));
  // The same file as the embedded one replaces nothing.
  auto same = p.run({"simulate", p.plan, "--profile", kProfiles[0]});
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, !Contains("note:"));
  CHECK(line_starting(same.out, "iteration ") == line_starting(p.search_out, "iteration "));
}

TEST_CASE("a corrupted embedded profile exits 2 naming the plan file's line and the field") {
  ProfiledPlan p;
  const std::string corrupt = p.edited("corrupt.json", [](Json& j) { j["profiles"][0]["profile"]["units"][3]["forward"] = "fast"; });
  const std::string text = read_text(corrupt);
  const auto at = text.find("\"fast\"");
  REQUIRE(at != std::string::npos);
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  const std::string where = corrupt + ":" + std::to_string(line) + ":";
  for (std::vector<std::string> args : {std::vector<std::string>{"simulate", corrupt}, {"show", corrupt}, {"check", corrupt},
                                        {"validate", "--plan", corrupt}, {"diff", p.plan, corrupt, "--simulate"}}) {
    auto r = p.run(args);
    INFO(args[0] << ": " << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(where) && Contains(": profiles[0].profile.units[3].forward: ") && Contains("'fast'"));
  }
}
