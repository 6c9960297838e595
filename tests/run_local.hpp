#pragma once
// Training runs for the CLI tests: the single-device reference, `hetexec run-local` of a plan
// (its losses from --metrics-out), and the comparison every plan's losses must pass.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data.hpp"
#include "process.hpp"
#include "spec/model.hpp"
#include "train/reference.hpp"

namespace het::test {

inline const std::string kCluster = std::string(HET_SOURCE_DIR) + "/configs/clusters/demo-1x4a100-1x4v100.yaml";

// The losses of `steps` steps of single-device training (lr 1e-3, synthetic data of seed 1).
inline std::vector<double> reference(const std::string& model, int steps) {
  auto spec = het::load_model(model);
  REQUIRE(spec.ok());
  auto batches = het::data::Batches::synthetic(spec->vocab_size, spec->seq_length, 1);
  het::train::Settings st;
  st.steps = steps;
  st.optimizer.lr = 1e-3;
  return het::train::train_reference<float>(*spec, batches, st);
}

// The losses of `hetexec run-local PLAN --model MODEL --cluster kCluster --steps N EXTRA...`,
// one per step run (a resumed run's from its first step on); its output in *out, its memory
// line's per-rank peaks in *memory. `hetexec`: the binary (another build's, e.g. the emulated
// GPUs'); `cluster`: another cluster file.
inline std::vector<double> run_local(const std::string& plan, const std::string& model, int steps,
                                     const std::vector<std::string>& extra = {}, std::string* out = nullptr,
                                     const std::string& hetexec = HETEXEC_BIN, nlohmann::json* memory = nullptr,
                                     const std::string& cluster = kCluster) {
  TempDir dir;
  const std::string metrics = dir.path() + "/m.jsonl";
  std::vector<std::string> argv = {hetexec, "run-local", plan, "--model", model, "--cluster", cluster, "--steps",
                                   std::to_string(steps), "--metrics-out", metrics};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run_process(argv, 300);
  if (out) *out = r.out;
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(metrics);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {  // step lines, then the memory line
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    if (memory && j.contains("memory")) *memory = std::move(j["memory"]);
  }
  return losses;
}

// Losses equal to within 1e-5 relative, step by step.
inline void check_equal(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-5));
  }
}

}  // namespace het::test
