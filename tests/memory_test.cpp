// Issue 17: every rank's peak memory measured by the runtime (runtime/memory.hpp) against the
// planner's prediction (cost/memory.hpp), for the plan shapes of bench/fidelity (the same table
// as scripts/bench-memory.sh): pipelines, DP, TP, CP, ZeRO-1, recompute none / selective /
// full, every schedule kind. Memory, unlike time, does not depend on the machine's load.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.hpp"

using het::test::run_process;
#include "test_util.hpp"

namespace {

const std::string kSrc = HET_SOURCE_DIR;

// The memory line run-local copies to its metrics file: every rank's peak.
nlohmann::json memory_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("memory")) return j["memory"];
  }
  return nlohmann::json();
}

}  // namespace

TEST_CASE("run-local measures every rank's peak memory, and the planner predicts it within 10% for every plan shape") {
  het::test::TempDir dir;
  struct Case {
    std::string plan, model;
  };
  const std::vector<Case> cases = {
      {"gpt-pipe2", "tiny-gpt"},          {"gpt-dp2", "tiny-gpt"},           {"llama-tp2", "tiny-llama"},
      {"gpt-cp2", "tiny-gpt"},            {"gpt-recompute", "tiny-gpt"},     {"gpt-pipe3-gpipe", "tiny-gpt"},
      {"llama-eager-1f1b", "tiny-llama"}, {"gpt-h-1f1b", "tiny-gpt"},        {"llama-virtual-1f1b", "tiny-llama"},
      {"llama-mixed-dp-tp", "tiny-llama"}, {"gpt-two-pipelines", "tiny-gpt"}, {"gpt-dp2", "../../bench/memory/tiny-gpt-zero1"},
  };
  std::vector<double> optimizer_bytes;  // rank 0's AdamW moments: gpt-dp2, then with ZeRO-1
  for (const auto& c : cases) {
    const std::string plan = kSrc + "/bench/fidelity/plans/" + c.plan + ".plan.json";
    const std::vector<std::string> inputs = {"--model", kSrc + "/configs/models/" + c.model + ".yaml", "--cluster",
                                             kSrc + "/bench/fidelity/cluster.yaml"};
    const std::string metrics = dir.path() + "/" + c.plan + ".metrics.jsonl";
    std::vector<std::string> run = {HETEXEC_BIN, "run-local", plan, "--steps", "1", "--metrics-out", metrics};
    run.insert(run.end(), inputs.begin(), inputs.end());
    auto r = run_process(run, 300);
    INFO(c.plan << " with " << c.model << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("peak memory per rank"));
    std::vector<std::string> sim = {HETPLAN_BIN, "simulate", plan, "--format", "json"};
    sim.insert(sim.end(), inputs.begin(), inputs.end());
    auto s = run_process(sim);
    REQUIRE(s.exit_code == 0);
    const auto predicted = nlohmann::json::parse(s.out);
    const auto measured = memory_of(metrics);
    REQUIRE(measured.is_array());
    std::size_t rank = 0;
    for (const auto& pipe : predicted["pipelines"])
      for (const auto& st : pipe["stages"])
        for (std::size_t k = 0; k < st["devices"].size(); ++k, ++rank) {
          REQUIRE(rank < measured.size());
          const auto& m = measured[rank];
          const double pred = st["predicted"]["memory_bytes"].get<double>(), heap = m["heap"].get<double>();
          INFO("rank " << rank << ": predicted " << pred << " B, measured " << m.dump());
          CHECK(std::fabs(pred / heap - 1) <= 0.10);
          // The heap holds the buffers the rank accounts (its growth since before the stage was made).
          CHECK(m["accounted"].get<double>() <= heap);
          CHECK(m["activations"].get<double>() > 0);
        }
    CHECK(rank == measured.size());
    if (c.plan == "gpt-dp2") optimizer_bytes.push_back(measured[0]["optimizer"].get<double>());
  }
  // ZeRO-1 over dp 2: each rank holds half of the moments.
  REQUIRE(optimizer_bytes.size() == 2);
  CHECK(optimizer_bytes[1] == Approx(optimizer_bytes[0] / 2).epsilon(0.01));
}
