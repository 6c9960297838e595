// Timing-sensitive tests (run-local's emulation, the search's time to a plan); ctest runs them
// alone (RUN_SERIAL).
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "process.hpp"

using het::test::run_process;

namespace {
const std::string kSrc = HET_SOURCE_DIR;
}

TEST_CASE("emulated links and devices slow a run down without changing what it computes") {
  const std::string m = kSrc + "/configs/models/tiny-gpt.yaml";
  const std::string plan = kSrc + "/tests/data/plans/tiny-cpu-pipeline.plan.json";
  auto run = [&](const std::string& cluster, std::vector<std::string> flags) {
    het::test::TempDir dir;
    std::vector<std::string> args = {HETEXEC_BIN, "run-local", plan, "--model", m, "--cluster", cluster, "--steps", "5",
                                     "--metrics-out", dir.path() + "/m.jsonl"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run_process(args, 120);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::ifstream in(dir.path() + "/m.jsonl");
    std::vector<std::pair<double, double>> out;  // (loss, step_s)
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      out.emplace_back(j["loss"].get<double>(), j["step_s"].get<double>());
    }
    return out;
  };
  const std::string slow_link = kSrc + "/tests/data/tiny-slow-link.yaml";
  auto plain = run(slow_link, {});
  auto links = run(slow_link, {"--emulate-links"});
  auto devices = run(kSrc + "/configs/clusters/tiny-cpu.yaml", {"--emulate-devices"});
  REQUIRE(plain.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(links[i].first == plain[i].first);  // bit-identical losses
    CHECK(devices[i].first == plain[i].first);
  }
  auto steady = [](const std::vector<std::pair<double, double>>& v) {  // steps after the first
    double s = 0;
    for (std::size_t i = 1; i < v.size(); ++i) s += v[i].second;
    return s / double(v.size() - 1);
  };
  INFO("plain " << steady(plain) << " s, links " << steady(links) << " s, devices " << steady(devices) << " s");
  // 8 activation messages of 16 KiB per step cross the 10 Mbit/s link one way (13 ms each),
  // 8 gradients the other way: at least 100 ms more per step.
  CHECK(steady(links) > steady(plain) + 0.1);
  // The slow subcluster's stage, now the bottleneck, is stretched 4x.
  CHECK(steady(devices) > steady(plain) * 1.2);
}


TEST_CASE("hetplan search with its default budget plans HetAuto's exp3 in under 10 s, 1.15x faster than uniform") {
  het::test::TempDir dir;
  auto search = [&](const std::string& algo) {
    const std::string out = dir.path() + "/" + algo + ".json";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_process({HETPLAN_BIN, "search", "--algo", algo, "--model", kSrc + "/configs/models/hetauto-exp3-llama-96l.yaml",
                          "--cluster", kSrc + "/configs/clusters/hetauto-exp3-32h20-64h800-128a100-512a2.yaml", "-o", out},
                         120);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::ifstream in(out);
    return std::make_pair(s, nlohmann::json::parse(in)["predicted"]["iteration_s"].get<double>());
  };
  const auto [auto_s, auto_iteration] = search("auto");
  const auto [uniform_s, uniform_iteration] = search("uniform");
  INFO("auto: " << auto_iteration << " s per iteration, found in " << auto_s << " s; uniform: " << uniform_iteration);
  CHECK(auto_s < 10);
  CHECK(uniform_iteration / auto_iteration >= 1.15);
}
