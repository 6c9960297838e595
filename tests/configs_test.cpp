#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "test_util.hpp"

using namespace het;
namespace fs = std::filesystem;

namespace {
std::vector<fs::path> yaml_files(const char* dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(HET_SOURCE_DIR) / dir))
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}
std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("every shipped model is valid, cites its source, and has the size its name says") {
  auto files = yaml_files("configs/models");
  REQUIRE(files.size() >= 10);
  for (const auto& f : files) {
    INFO(f.string());
    auto m = load_model(f.string());
    INFO((m ? std::string() : test::text(m.errors())));
    REQUIRE(m.ok());
    CHECK_THAT(read_text(f), Catch::Contains("source:"));
    // "...-15b.yaml" or "...-350m.yaml": the parameter count is within 10% of the name's.
    std::smatch size;
    std::string stem = f.stem().string();
    if (std::regex_search(stem, size, std::regex(R"(-(\d+)([bm])(-|$))"))) {
      double named = std::stod(size[1]) * (size[2] == "b" ? 1e9 : 1e6);
      CHECK(static_cast<double>(parameter_count(*m)) == Approx(named).epsilon(0.10));
    }
  }
}

TEST_CASE("every shipped cluster is valid and cites its source") {
  auto files = yaml_files("configs/clusters");
  REQUIRE(files.size() >= 10);
  for (const auto& f : files) {
    INFO(f.string());
    auto c = load_cluster(f.string(), test::catalog());
    INFO((c ? std::string() : test::text(c.errors())));
    REQUIRE(c.ok());
    CHECK(c->num_devices() > 0);
    CHECK_THAT(read_text(f), Catch::Contains("source:"));
  }
}

TEST_CASE("the seed clusters have the device counts of their papers") {
  auto count = [](const char* file) {
    auto c = load_cluster(std::string(HET_SOURCE_DIR "/configs/clusters/") + file, test::catalog());
    REQUIRE(c.ok());
    return c->num_devices();
  };
  CHECK(count("hapt-4x8a100-4x8v100.yaml") == 64);             // HAPT §6: 4x8 A100 + 4x8 V100
  CHECK(count("hapt-case-study-2x2a100-1x2v100.yaml") == 6);   // HAPT §2.2.2
  CHECK(count("hetu-16h800-32h20.yaml") == 48);                // Hetu: 16 H800 + 32 H20
  CHECK(count("hexiscale-240gpu.yaml") == 240);                // HexiScale App. B
  CHECK(count("hetauto-exp1-32a100-32a2.yaml") == 64);         // HetAuto Table 2, exp1
}
