// Bad input through the real CLI: each case writes a broken file, runs `hetplan validate`
// and checks exit status 2, no crash, and a message naming the file, line and field.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <map>

#include "process.hpp"

using het::test::run_process;
using het::test::TempDir;

namespace {

const std::string kSrc = HET_SOURCE_DIR;

const std::string kModel = R"(name: m
architecture: gpt
num_layers: 24
hidden_size: 1024
num_attention_heads: 16
vocab_size: 50272
seq_length: 2048
training:
  global_batch_size: 64
  micro_batch_sizes: [1, 2, 4]
)";

const std::string kCluster = R"(name: c
subclusters:
  - name: a100
    device: A100-40GB
    nodes: 1
    devices_per_node: 4
  - name: v100
    device: {type: V100-16GB, memory: 16GiB}
    nodes: 2
    devices_per_node: 2
    inter_node: {bandwidth: 100Gbit/s, latency: 5us}
links:
  - {between: [a100, v100], bandwidth: 10Gbit/s, latency: 1ms}
)";

const std::string kProfile = R"(format: hetplan.profile/v1
device: A100-40GB
model: {architecture: gpt, hidden_size: 1024, num_attention_heads: 16, seq_length: 2048}
units:
  - {unit: layer, tp: 1, cp: 1, micro_batch_size: 1, forward: 1.9ms, backward: 3.4ms}
  - {unit: head, tp: 1, cp: 1, micro_batch_size: 1, forward: 2.1ms, backward: 4.0ms}
)";

const std::string kPlan = R"({
  "format": "hetplan.plan/v1",
  "schedule": {"kind": "1f1b"},
  "pipelines": [
    {"micro_batch_size": 4, "num_microbatches": 16,
     "stages": [
       {"subcluster": "a100", "layers": [0, 16], "tp": 2, "dp": 2,
        "devices": [{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 0, "device": 2}, {"node": 0, "device": 3}]},
       {"subcluster": "v100", "layers": [17, 25], "dp": 4,
        "devices": [{"node": 0, "device": 0}, {"node": 0, "device": 1}, {"node": 1, "device": 0}, {"node": 1, "device": 1}]}
     ]}
  ]
}
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  if (pos == std::string::npos) throw std::runtime_error("test bug: '" + from + "' not in the input");
  return text.replace(pos, from.size(), to);
}

// Writes the inputs (kind -> content; kinds: model, cluster, profile, plan), runs validate on
// them, and checks the failure. Every expected fragment must appear in stderr.
void expect_invalid(const std::map<std::string, std::string>& inputs, const std::vector<std::string>& expected) {
  TempDir dir;
  std::vector<std::string> args = {HETPLAN_BIN, "validate"};
  for (const auto& [kind, content] : inputs) {
    std::string name = kind == "plan" ? "plan.json" : kind + ".yaml";
    args.push_back("--" + kind);
    args.push_back(dir.write(name, content));
  }
  auto r = run_process(args);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.out, Catch::Contains("INVALID"));
  for (const auto& e : expected) CHECK_THAT(r.err, Catch::Contains(e));
}

}  // namespace

// ---- model.yaml ----------------------------------------------------------------------

TEST_CASE("bad input: malformed YAML") {
  expect_invalid({{"model", replace(kModel, "[1, 2, 4]", "[1, 2, 4")}}, {"model.yaml:", "syntax error"});
}
TEST_CASE("bad input: empty file") { expect_invalid({{"model", ""}}, {"model.yaml: the file is empty"}); }
TEST_CASE("bad input: binary garbage") {
  expect_invalid({{"model", std::string("\x7f" "ELF\x02\x01\x01\x00\x00\xff\xfe\x00\x01", 14)}},
                 {"model.yaml:1: the file is not UTF-8 text"});
}
TEST_CASE("bad input: a list where a map of fields belongs") {
  expect_invalid({{"model", "- name: m\n- num_layers: 2\n"}}, {"model.yaml:1:1: expected a map of fields at the top, got a list"});
}
TEST_CASE("bad input: missing required field") {
  expect_invalid({{"model", replace(kModel, "num_layers: 24\n", "")}},
                 {"model.yaml:1:1: num_layers: missing required field"});
}
TEST_CASE("bad input: wrong type for a count") {
  expect_invalid({{"model", replace(kModel, "num_layers: 24", "num_layers: many")}},
                 {"model.yaml:3:13: num_layers: expected a whole number, got 'many'"});
}
TEST_CASE("bad input: negative count") {
  expect_invalid({{"model", replace(kModel, "num_layers: 24", "num_layers: -24")}},
                 {"model.yaml:3:13: num_layers: expected a whole number at least 1, got '-24'"});
}
TEST_CASE("bad input: zero size") {
  expect_invalid({{"model", replace(kModel, "hidden_size: 1024", "hidden_size: 0")}},
                 {"model.yaml:4:14: hidden_size: expected a whole number at least 1"});
}
TEST_CASE("bad input: unknown key with a suggestion") {
  expect_invalid({{"model", replace(kModel, "vocab_size", "vocab_sise")}},
                 {"model.yaml:6:1: vocab_sise: unknown field; did you mean 'vocab_size'?", "vocab_size: missing"});
}
TEST_CASE("bad input: the same key twice") {
  expect_invalid({{"model", kModel + "num_layers: 12\n"}}, {"model.yaml:11:1: num_layers: this field is given twice"});
}
TEST_CASE("bad input: heads not divisible by kv-heads") {
  expect_invalid({{"model", replace(kModel, "num_attention_heads: 16", "num_attention_heads: 16\nnum_kv_heads: 6")}},
                 {"model.yaml:6:15: num_kv_heads: num_attention_heads 16 is not divisible by num_kv_heads 6"});
}
TEST_CASE("bad input: hidden size not divisible by heads") {
  expect_invalid({{"model", replace(kModel, "num_attention_heads: 16", "num_attention_heads: 12")}},
                 {"model.yaml:5:22: num_attention_heads: hidden_size 1024 is not divisible by num_attention_heads 12"});
}
TEST_CASE("bad input: global batch not divisible by any micro-batch size") {
  expect_invalid({{"model", replace(kModel, "[1, 2, 4]", "[3, 5]")}},
                 {"model.yaml:9:22: training.global_batch_size: global batch size 64 is not divisible by any of the "
                  "micro_batch_sizes"});
}
TEST_CASE("bad input: a word outside the allowed set") {
  expect_invalid({{"model", replace(kModel, "architecture: gpt", "architecture: mamba")}},
                 {"model.yaml:2:15: architecture: expected one of gpt, llama, got 'mamba'"});
}
TEST_CASE("bad input: number out of range") {
  expect_invalid({{"model", kModel + "  zero_stage: 4\n"}},
                 {"model.yaml:11:15: training.zero_stage: expected a whole number between 0 and 3, got '4'"});
}
TEST_CASE("bad input: nonexistent file") {
  auto r = run_process({HETPLAN_BIN, "validate", "--model", "/nonexistent/model.yaml"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent/model.yaml: cannot open the file: No such file or directory"));
}
TEST_CASE("bad input: a directory instead of a file") {
  TempDir dir;
  auto r = run_process({HETPLAN_BIN, "validate", "--cluster", dir.path()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(dir.path() + ": cannot read the file: it is a directory"));
}

// ---- cluster.yaml --------------------------------------------------------------------

TEST_CASE("bad input: unit-less bandwidth") {
  expect_invalid({{"cluster", replace(kCluster, "bandwidth: 10Gbit/s", "bandwidth: 10")}},
                 {"cluster.yaml:13:40: links[0].bandwidth: expected a bandwidth like 25Gbit/s, got the bare number '10'"});
}
TEST_CASE("bad input: wrong unit") {
  expect_invalid({{"cluster", replace(kCluster, "memory: 16GiB", "memory: 16GB/s")}},
                 {"cluster.yaml:8:39: subclusters[1].device.memory: expected a size like 40GiB, got '16GB/s', which is a bandwidth"});
}
TEST_CASE("bad input: negative latency") {
  expect_invalid({{"cluster", replace(kCluster, "latency: 5us", "latency: -5us")}},
                 {"subclusters[1].inter_node.latency: expected a non-negative time"});
}
TEST_CASE("bad input: unknown subcluster in a link") {
  expect_invalid({{"cluster", replace(kCluster, "[a100, v100]", "[a100, h100]")}},
                 {"cluster.yaml:13:22: links[0].between[1]: unknown subcluster 'h100' (subclusters: a100, v100)"});
}
TEST_CASE("bad input: duplicate subcluster names") {
  expect_invalid({{"cluster", replace(kCluster, "  - name: v100", "  - name: a100")}},
                 {"cluster.yaml:7:11: subclusters[1].name: subcluster name 'a100' is already used at line 3"});
}
TEST_CASE("bad input: a pair of subclusters without a link") {
  expect_invalid({{"cluster", kCluster.substr(0, kCluster.find("links:"))}},
                 {"cluster.yaml:3:3: subclusters: no link between subclusters a100 and v100"});
}
TEST_CASE("bad input: zero nodes") {
  expect_invalid({{"cluster", replace(kCluster, "nodes: 1", "nodes: 0")}},
                 {"cluster.yaml:5:12: subclusters[0].nodes: expected a whole number at least 1, got '0'"});
}
TEST_CASE("bad input: device type not in the catalog") {
  expect_invalid({{"cluster", replace(kCluster, "device: A100-40GB", "device: A100-4OGB")}},
                 {"cluster.yaml:4:13: subclusters[0].device: device type 'A100-4OGB' is not in the device catalog"});
}
TEST_CASE("bad input: a subcluster of several nodes without its inter-node link") {
  expect_invalid({{"cluster", replace(kCluster, "    inter_node: {bandwidth: 100Gbit/s, latency: 5us}\n", "")}},
                 {"cluster.yaml:7:5: subclusters[1].inter_node: missing required field"});
}
TEST_CASE("bad input: a map where a list belongs") {
  expect_invalid({{"cluster", "name: c\nsubclusters: {name: a}\n"}},
                 {"cluster.yaml:2:14: subclusters: expected a list, got a map"});
}

// ---- profile.yaml --------------------------------------------------------------------

TEST_CASE("bad input: profile of another format") {
  expect_invalid({{"profile", replace(kProfile, "hetplan.profile/v1", "sailor")}},
                 {"profile.yaml:1:9: format: expected hetplan.profile/v1, got 'sailor'"});
}
TEST_CASE("bad input: unit-less time in a profile") {
  expect_invalid({{"profile", replace(kProfile, "forward: 1.9ms", "forward: 1.9")}},
                 {"profile.yaml:5:63: units[0].forward: expected a time like 2us, got the bare number '1.9'"});
}
TEST_CASE("bad input: a profile row given twice") {
  expect_invalid({{"profile", replace(kProfile, "unit: head", "unit: layer")}},
                 {"profile.yaml:6:5: units[1]: a layer row with tp 1, cp 1, micro_batch_size 1 and seq_length 2048 is "
                  "already given at line 5"});
}
TEST_CASE("bad input: a profile measured for another model") {
  expect_invalid({{"profile", replace(kProfile, "hidden_size: 1024", "hidden_size: 2048")}, {"model", kModel}},
                 {"profile.yaml:3: model.hidden_size: the profile was measured for hidden_size 2048, but the model (",
                  "model.yaml) has 1024"});
}

TEST_CASE("bad input: search and simulate refuse a profile measured for other model dimensions") {
  // Recorded dimensions (kv heads, MLP width, vocabulary) are held to the model like the hidden
  // size; search and simulate exit 2 naming the field instead of costing with a wrong profile.
  TempDir dir;
  const std::string model = dir.write("model.yaml", kModel), cluster = dir.write("cluster.yaml", kCluster);
  const std::string plan = dir.write("plan.json", kPlan);
  const std::string wrong = dir.write("profile.yaml", replace(kProfile, "num_attention_heads: 16", "num_attention_heads: 16, vocab_size: 77"));
  for (const auto& args : {std::vector<std::string>{HETPLAN_BIN, "search", "--model", model, "--cluster", cluster, "--profile", wrong,
                                                    "--time-budget", "1"},
                           std::vector<std::string>{HETPLAN_BIN, "simulate", plan, "--model", model, "--cluster", cluster,
                                                    "--profile", wrong}}) {
    auto r = run_process(args);
    INFO(args[1] << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("profile.yaml:3: model.vocab_size: the profile was measured for vocab_size 77, but the model ("));
  }
}

// ---- plan.json -----------------------------------------------------------------------

TEST_CASE("bad input: plan JSON syntax error") {
  expect_invalid({{"plan", replace(kPlan, "\"1f1b\"}", "\"1f1b\"")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:", "syntax error"});
}
TEST_CASE("bad input: plan stage on an unknown subcluster") {
  expect_invalid({{"plan", replace(kPlan, "\"v100\"", "\"h100\"")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:9: pipelines[0].stages[1].subcluster: unknown subcluster 'h100' (cluster c has a100, v100)"});
}
TEST_CASE("bad input: plan stages overlap") {
  expect_invalid({{"plan", replace(kPlan, "[17, 25]", "[15, 25]")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:9: pipelines[0].stages[1].layers: starts at unit 15 but units up to 16 belong to the previous stage"});
}
TEST_CASE("bad input: plan misses layers") {
  expect_invalid({{"plan", replace(kPlan, "[17, 25]", "[17, 20]")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:9: pipelines[0].stages[1].layers: the last stage ends at unit 20 but the model's units run to 25 (head)"});
}
TEST_CASE("bad input: plan stage with the wrong device count") {
  expect_invalid({{"plan", replace(kPlan, "\"dp\": 4", "\"dp\": 2")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:9: pipelines[0].stages[1].devices: expected dp*cp*tp = 2*1*1 = 2 devices, got 4"});
}
TEST_CASE("bad input: plan uses a device twice") {
  expect_invalid({{"plan", replace(kPlan, "{\"node\": 1, \"device\": 0}", "{\"node\": 1, \"device\": 1}")},
                  {"model", kModel},
                  {"cluster", kCluster}},
                 {"plan.json:9: pipelines[0].stages[1].devices[3]: device (node 1, device 1) of v100 is already used by "
                  "pipelines[0].stages[1] (line 9)"});
}
TEST_CASE("bad input: plan tp does not divide the heads") {
  expect_invalid({{"plan", replace(kPlan, "\"tp\": 2, \"dp\": 2", "\"tp\": 3, \"dp\": 1, \"cp\": 1")},
                  {"model", kModel},
                  {"cluster", kCluster}},
                 {"pipelines[0].stages[0].tp: tp 3 must divide num_attention_heads 16"});
}
TEST_CASE("bad input: plan micro-batches do not add up to the global batch") {
  expect_invalid({{"plan", replace(kPlan, "\"num_microbatches\": 16", "\"num_microbatches\": 8")},
                  {"model", kModel},
                  {"cluster", kCluster}},
                 {"plan.json:5: pipelines: micro_batch_size*num_microbatches summed over pipelines is 4*8 = 32"});
}
TEST_CASE("bad input: plan with an unknown schedule") {
  expect_invalid({{"plan", replace(kPlan, "\"1f1b\"", "\"2f2b\"")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:3:24: schedule.kind: expected one of gpipe, 1f1b, eager-1f1b, h-1f1b, virtual-1f1b, got '2f2b'"});
}
TEST_CASE("bad input: plan without its format") {
  expect_invalid({{"plan", replace(kPlan, "\"format\": \"hetplan.plan/v1\",", "")}, {"model", kModel}, {"cluster", kCluster}},
                 {"plan.json:1:1: format: missing required field"});
}
TEST_CASE("bad input: plan without model or cluster anywhere") {
  expect_invalid({{"plan", kPlan}}, {"plan.json:1:1: model: missing: a plan embeds its model, or give one with --model"});
}

// ---- limits (libplan/spec/limits.hpp) -------------------------------------------------

TEST_CASE("bad input: a node count past the limit, or nodes x devices_per_node past the cluster's, is refused naming the field") {
  // 536870912 nodes of 4 devices wrapped to -2147483648 devices in an int.
  expect_invalid({{"cluster", replace(kCluster, "nodes: 1", "nodes: 536870912\n    inter_node: {bandwidth: 5GB/s, latency: 20us}")}},
                 {"cluster.yaml:5:12: subclusters[0].nodes: expected a whole number at most 1048576 (the limit on nodes in a subcluster), "
                  "got '536870912'"});
  expect_invalid({{"cluster", replace(kCluster, "nodes: 1", "nodes: 1000000\n    inter_node: {bandwidth: 5GB/s, latency: 20us}")}},
                 {"cluster.yaml:5:12: subclusters[0].nodes: nodes x devices_per_node = 1000000 x 4 devices, more than the limit of "
                  "1048576 devices in a cluster"});
  // Each subcluster within the limit, the cluster past it.
  expect_invalid({{"cluster", replace(replace(kCluster, "nodes: 2", "nodes: 300000"), "nodes: 1",
                                      "nodes: 200000\n    inter_node: {bandwidth: 5GB/s, latency: 20us}")}},
                 {"subclusters[1].nodes: nodes x devices_per_node = 300000 x 2 devices (1400000 with the subclusters before), more than "
                  "the limit of 1048576 devices in a cluster"});
}

TEST_CASE("bad input: a count or a list past its limit is refused naming the field") {
  expect_invalid({{"model", replace(kModel, "num_layers: 24", "num_layers: 100000")}},
                 {"model.yaml:3:13: num_layers: expected a whole number at most 1024 (the limit on layers), got '100000'"});
  expect_invalid({{"model", replace(kModel, "num_layers: 24", "num_layers: 99999999999999999999999")}},
                 {"model.yaml:3:13: num_layers: expected a whole number at most 1024 (the limit on layers)"});
  expect_invalid({{"model", replace(kModel, "global_batch_size: 64", "global_batch_size: 1048576")}},
                 {"training.global_batch_size: expected a whole number at most 65536 (the limit on sequences in the global batch)"});
  expect_invalid({{"model", replace(replace(kModel, "seq_length: 2048", "seq_length: 4194304"), "global_batch_size: 64", "global_batch_size: 512")}},
                 {"model.yaml:7:13: seq_length: training.global_batch_size x seq_length = 512 x 4194304 tokens per iteration, more than "
                  "the limit of 1073741824"});
  // 65 micro-batch sizes: every one valid, the list too long.
  std::string sizes;
  for (int b = 1; b <= 65; ++b) sizes += (sizes.empty() ? "" : ", ") + std::to_string(b);
  expect_invalid({{"model", replace(kModel, "[1, 2, 4]", "[" + sizes + "]")}},
                 {"model.yaml:10:22: training.micro_batch_sizes: expected at most 64 entries (the limit on micro-batch sizes), got 65"});
  // 65 subclusters.
  std::string cluster = "name: c\ndefault_link: {bandwidth: 1GB/s, latency: 1ms}\nsubclusters:\n";
  for (int i = 0; i < 65; ++i) cluster += "  - {name: s" + std::to_string(i) + ", device: A100-40GB, nodes: 1, devices_per_node: 1}\n";
  expect_invalid({{"cluster", cluster}}, {"cluster.yaml:4:3: subclusters: expected at most 64 entries (the limit on subclusters), got 65"});
}

TEST_CASE("bad input: a plan whose stages x micro-batches are past what the simulator steps through is refused") {
  // 70 stages of 65,536 micro-batches: 4,587,520 steps (24 bytes each), past 2^22.
  std::string stages;
  for (int k = 0; k < 70; ++k) {
    const std::string units = k < 69 ? std::to_string(k) + ", " + std::to_string(k) : "69, 101";
    stages += std::string(k ? ",\n" : "") + "{\"subcluster\": \"a\", \"layers\": [" + units + "], \"devices\": [{\"node\": " +
              std::to_string(k / 8) + ", \"device\": " + std::to_string(k % 8) + "}]}";
  }
  const std::string plan = "{\"format\": \"hetplan.plan/v1\", \"schedule\": {\"kind\": \"1f1b\"},\n\"pipelines\": [\n"
                           "{\"micro_batch_size\": 1, \"num_microbatches\": 65536, \"stages\": [\n" + stages + "]}]}\n";
  const std::string model = replace(replace(kModel, "num_layers: 24", "num_layers: 100"), "global_batch_size: 64", "global_batch_size: 65536");
  const std::string cluster = "name: c\nsubclusters:\n  - {name: a, device: A100-40GB, nodes: 9, devices_per_node: 8, "
                              "inter_node: {bandwidth: 25GB/s, latency: 10us}}\n";
  expect_invalid({{"plan", plan}, {"model", model}, {"cluster", cluster}},
                 {"plan.json:3: pipelines: stages x num_microbatches summed over the pipelines is 4587520, more than the limit of "
                  "4194304 (the simulator steps through each)"});
}

// ---- files that are not regular files ---------------------------------------------------

TEST_CASE("bad input: /dev/zero and a FIFO are refused at once by hetplan, not read forever or waited on") {
  TempDir dir;
  const std::string fifo = dir.path() + "/model.yaml";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::string cluster = kSrc + "/configs/clusters/tiny-cpu.yaml";
  for (const auto& [file, kind] : {std::pair<std::string, std::string>{"/dev/zero", "a character device"}, {fifo, "a FIFO"}}) {
    for (const auto& args : {std::vector<std::string>{HETPLAN_BIN, "search", "--model", file, "--cluster", cluster, "--time-budget", "1"},
                             std::vector<std::string>{HETPLAN_BIN, "validate", "--cluster", file},
                             std::vector<std::string>{HETPLAN_BIN, "show", file}}) {
      auto r = run_process(args, 30);
      INFO(args[1] << " " << file << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
      CHECK(r.signal == 0);  // not killed at the timeout
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains(file + ": cannot read the file: it is not a regular file (" + kind + ")"));
    }
  }
}

TEST_CASE("bad input: hetexec refuses a FIFO or /dev/zero as its data, token or text file at once") {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::string plan = kSrc + "/tests/data/plans/pipeline.plan.json", model = kSrc + "/configs/models/tiny-gpt.yaml",
                    cluster = kSrc + "/configs/clusters/demo-1x4a100-1x4v100.yaml";
  for (const std::string& file : {fifo, std::string("/dev/zero")}) {
    for (const auto& args : {std::vector<std::string>{HETEXEC_BIN, "run-local", plan, "--model", model, "--cluster", cluster, "--data", file},
                             std::vector<std::string>{HETEXEC_BIN, "status", "--agents", "a100/0=127.0.0.1:1", "--token-file", file},
                             std::vector<std::string>{HETEXEC_BIN, "prepare-data", file, "-o", dir.path() + "/tokens.bin"}}) {
      auto r = run_process(args, 30);
      INFO(args[1] << " " << file << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
      CHECK(r.signal == 0);  // not killed at the timeout
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::Contains(file + ": ") && Catch::Contains("is not a regular file"));
      CHECK_THAT(r.out, !Catch::Contains("running"));  // no rank started
    }
  }
}

// ---- host:port --------------------------------------------------------------------------

TEST_CASE("bad input: a port outside 1..65535 is refused by agent --listen (0: any free port) and by --agents") {
  TempDir dir;
  for (const std::string port : {"99999", "65536", "-1", "http", "", "99999999999999999999"}) {
    auto r = run_process({HETEXEC_BIN, "agent", "--listen", "127.0.0.1:" + port, "--node", "a100/0", "--devices", "cpu:1", "--workdir",
                          dir.path() + "/work"},
                         30);
    INFO("port '" << port << "'\nstdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.signal == 0);  // it did not listen (on main, 99999 listened on port 34463)
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("listen: '127.0.0.1:" + port + "': "));
    CHECK_THAT(r.err, Catch::Contains("between 0 (any free port) and 65535") || Catch::Contains("no port"));
    CHECK_THAT(r.out, !Catch::Contains("listening"));
  }
  {  // port 0: a free port, which it names
    het::test::Background agent({HETEXEC_BIN, "agent", "--listen", "127.0.0.1:0", "--node", "a100/0", "--devices", "cpu:1", "--workdir",
                                 dir.path() + "/work"});
    CHECK(agent.wait_for_output("listening on 127.0.0.1:", 30));
  }
  for (const std::string port : {"0", "70000", "x"}) {
    auto r = run_process({HETEXEC_BIN, "status", "--agents", "a100/0=127.0.0.1:" + port}, 30);
    INFO("port '" << port << "'\nstdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("agents: '127.0.0.1:" + port + "': the port must be") && Catch::Contains("between 1 and 65535"));
  }
  const std::string inventory = dir.write("inventory.yaml", "agents:\n  - {node: a100/0, address: 127.0.0.1:65536}\n");
  auto r = run_process({HETEXEC_BIN, "status", "--inventory", inventory}, 30);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("inventory.yaml:2:29: agents[0].address: '127.0.0.1:65536': the port must be between 1 and 65535"));
}
