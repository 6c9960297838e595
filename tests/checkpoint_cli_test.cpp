// Checkpoints as users take them: run-local writes them while it trains, resumes them onto
// other plans, and `hetexec checkpoint export` writes a file an independent reader opens.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "error_text.hpp"
#include "process.hpp"
#include "run_local.hpp"
#include "spec/model.hpp"

using het::test::check_equal;
using het::test::kCluster;
using het::test::run_local;
using het::test::run_process;

namespace {

const std::string kSrc = HET_SOURCE_DIR;
std::string model_file(const std::string& name) { return kSrc + "/configs/models/" + name + ".yaml"; }
std::string plan_file(const std::string& name) { return kSrc + "/tests/data/plans/" + name + ".plan.json"; }

std::vector<double> part(const std::vector<double>& v, std::size_t from, std::size_t to) {
  return {v.begin() + std::ptrdiff_t(from), v.begin() + std::ptrdiff_t(to)};
}

// tiny-gpt with ZeRO-1: each sync group's AdamW moments sharded over its members.
std::string zero1_model(const het::test::TempDir& dir) {
  std::ifstream in(model_file("tiny-gpt"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return dir.write("tiny-gpt-zero1.yaml", text.replace(text.find("zero_stage: 0"), 13, "zero_stage: 1"));
}

}  // namespace

TEST_CASE("a checkpoint resumed onto another plan trains on exactly: fewer devices, other tp and cp, other pipeline splits, ZeRO-1 shards") {
  het::test::TempDir models;
  struct Pair {
    std::string model, a, b;
  };
  const std::vector<Pair> pairs = {
      {model_file("tiny-gpt"), "mixed", "pipeline"},        // 5 ranks (tp 2 | dp 2 | 1) -> 2 stages of one device: fewer devices, tp 1
      {model_file("tiny-llama"), "tensor", "context"},       // tp 2, one stage -> cp 2 | dp 2 | tp 2 x cp 2: 8 ranks, 3 stages
      {model_file("tiny-llama"), "two-pipelines", "recompute"},  // two pipelines of 2 stages -> one of 3 with tp 2, recomputing
      {zero1_model(models), "two-pipelines-tp", "data"},    // ZeRO-1 moments sharded over one layout, read by another
  };
  for (const auto& p : pairs) {
    INFO(p.model << ": " << p.a << " for 6 steps, then " << p.b << " for 4");
    const auto whole = run_local(plan_file(p.a), p.model, 10);
    het::test::TempDir ck;
    const auto first = run_local(plan_file(p.a), p.model, 6, {"--checkpoint-dir", ck.path(), "--checkpoint-every", "3"});
    CHECK(first == part(whole, 0, 6));  // the same plan: bit for bit, checkpoints or not
    std::string out;
    const auto rest = run_local(plan_file(p.b), p.model, 10, {"--resume", ck.path()}, &out);
    CHECK_THAT(out, Catch::Contains("resumed from " + ck.path() + "/step-00000006 at step 6"));
    check_equal(rest, part(whole, 6, 10));
  }
}

TEST_CASE("a rank killed while writing a checkpoint leaves the previous one, which resumes correctly") {
  const std::string m = model_file("tiny-gpt");
  const auto whole = run_local(plan_file("mixed"), m, 6);
  het::test::TempDir ck;
  // Rank 1 (TP shard 1 of the first stage: it owns half of that stage's matrices) dies halfway
  // through writing the checkpoint of step 4.
  auto r = run_process({HETEXEC_BIN, "run-local", plan_file("mixed"), "--model", m, "--cluster", kCluster, "--steps", "6",
                        "--checkpoint-dir", ck.path(), "--checkpoint-every", "2", "--fault-die-rank", "1", "--fault-die-step", "4"},
                       300);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("killed") && Catch::Contains("rank 1"));
  CHECK(std::filesystem::is_directory(ck.path() + "/step-00000002"));
  CHECK_FALSE(std::filesystem::exists(ck.path() + "/step-00000004"));
  CHECK(std::filesystem::is_directory(ck.path() + "/.step-00000004.partial"));  // what it left, never read
  std::string out;
  const auto rest = run_local(plan_file("mixed"), m, 6, {"--resume", ck.path()}, &out);
  CHECK_THAT(out, Catch::Contains("at step 2"));
  CHECK(rest == part(whole, 2, 6));  // the same plan from the same state: bit for bit
}

TEST_CASE("run-local refuses checkpoint options it cannot use, with exit 2 and a sentence") {
  het::test::TempDir ck;
  const std::string m = model_file("tiny-gpt");
  auto run = [&](std::vector<std::string> extra, const std::string& plan = "pipeline", const std::string& model = "tiny-gpt") {
    std::vector<std::string> argv{HETEXEC_BIN, "run-local", plan_file(plan), "--model", model_file(model), "--cluster", kCluster, "--steps", "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, 120);
  };
  auto r = run({"--checkpoint-dir", ck.path()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--checkpoint-dir needs --checkpoint-every N"));
  r = run({"--resume", ck.path()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no checkpoint here"));
  REQUIRE(run({"--checkpoint-dir", ck.path(), "--checkpoint-every", "2"}).exit_code == 0);
  r = run({"--resume", ck.path()});  // the checkpoint is at step 4, the training ends there
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("is at step 4") && Catch::Contains("nothing is left to run"));
  r = run({"--resume", ck.path()}, "pipeline", "tiny-llama");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("holds a model with architecture \"gpt\"; this one has \"llama\""));
}

TEST_CASE("hetexec checkpoint export writes every tensor whole, and an independent reader finds the documented names, shapes and values") {
  // The same 3 steps of tiny-gpt and tiny-llama trained under two plans that shard them
  // differently, each exported, read by tests/read_safetensors.py (numpy only).
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    INFO(model);
    const auto spec = het::load_model(model_file(model));
    REQUIRE(spec.ok());
    het::test::TempDir dir;
    std::vector<std::string> exports;
    for (const char* plan : {"mixed", "pipeline"}) {
      const std::string ck = dir.path() + "/" + plan;
      run_local(plan_file(plan), model_file(model), 3, {"--checkpoint-dir", ck, "--checkpoint-every", "3"});
      exports.push_back(dir.path() + "/" + plan + ".safetensors");
      auto r = run_process({HETEXEC_BIN, "checkpoint", "export", ck, "-o", exports.back()});
      INFO(r.out << r.err);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.out, Catch::Contains("(step 3)"));
      auto shown = run_process({HETEXEC_BIN, "checkpoint", "inspect", ck});
      CHECK(shown.exit_code == 0);
      CHECK_THAT(shown.out, Catch::Contains("training resumes at step 3") && Catch::Contains("layer1.wq"));
    }
    std::ostringstream dims;
    dims << (spec->architecture == het::Architecture::gpt ? "gpt" : "llama") << "," << spec->num_layers << "," << spec->hidden_size << ","
         << spec->num_attention_heads << "," << spec->num_kv_heads << "," << spec->ffn_hidden_size << "," << spec->vocab_size << ","
         << spec->seq_length;
    auto r = run_process({HET_SYSTEM_PYTHON3, kSrc + "/tests/read_safetensors.py", "--model", dims.str(), exports[0], exports[1]});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("same names, shapes and values"));
  }
}
