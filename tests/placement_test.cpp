// Placement of a plan's ranks on nodes, and the check of a node's devices against the plan.
#include <catch2/catch.hpp>

#include "job/placement.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
job::Offer gpus(const std::string& name, double gib, int n) {
  job::Offer o{"cuda", {}};
  for (int i = 0; i < n; ++i) o.devices.push_back({name, gib * (1 << 30)});
  return o;
}
}  // namespace

TEST_CASE("node ids read SUBCLUSTER/INDEX and refuse anything else") {
  auto id = job::parse_node_id("a100/3");
  REQUIRE(id.ok());
  CHECK(id->subcluster == "a100");
  CHECK(id->index == 3);
  CHECK(id->to_string() == "a100/3");
  for (const char* bad : {"a100", "/0", "a100/", "a100/x", "a100/-1", "a100/99999999"}) {
    INFO(bad);
    CHECK_FALSE(job::parse_node_id(bad).ok());
  }
}

TEST_CASE("a plan's ranks land on the nodes and devices its stages name, in rank order") {
  const Plan plan = test::mixed_plan();
  const auto nodes = job::nodes_of(plan);
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].to_string() == "a100/0");
  CHECK(nodes[1].to_string() == "v100/0");
  const auto a100 = job::ranks_on(plan, nodes[0]);
  REQUIRE(a100.size() == 4);
  for (int r = 0; r < 4; ++r) CHECK((a100[std::size_t(r)].rank == r && a100[std::size_t(r)].device == r));
  const auto v100 = job::ranks_on(plan, nodes[1]);
  REQUIRE(v100.size() == 1);
  CHECK((v100[0].rank == 4 && v100[0].device == 0));
  CHECK(job::ranks_on(plan, {"v100", 1}).empty());
}

TEST_CASE("an offer must have the devices the plan uses: count for CPUs, type and memory for GPUs") {
  const Plan plan = test::mixed_plan();
  CHECK(job::check_offer(plan, {"a100", 0}, {"cpu", {{"cpu", 0}, {"cpu", 0}, {"cpu", 0}, {"cpu", 0}}}).empty());
  auto few = job::check_offer(plan, {"a100", 0}, {"cpu", {{"cpu", 0}, {"cpu", 0}}});
  REQUIRE(few.size() == 1);
  CHECK(few[0] == "a100/0: the plan uses device 3, the agent has 2 cpu devices");
  CHECK(job::check_offer(plan, {"a100", 0}, gpus("NVIDIA A100-SXM4-40GB", 40, 4)).empty());
  CHECK(job::check_offer(plan, {"a100", 0}, gpus("NVIDIA A100-SXM4-80GB", 80, 8)).empty());
  auto wrong = job::check_offer(plan, {"a100", 0}, gpus("NVIDIA H100 80GB HBM3", 80, 4));
  REQUIRE(wrong.size() == 4);
  CHECK(wrong[0] == "a100/0: device 0 is a NVIDIA H100 80GB HBM3, the plan expects a A100-40GB");
  auto small = job::check_offer(plan, {"v100", 0}, gpus("Tesla V100-PCIE-16GB", 8, 1));
  REQUIRE(small.size() == 1);
  CHECK_THAT(small[0], Catch::Contains("has 8 GiB, the plan's V100-16GB has 16 GiB"));
  CHECK(job::check_offer(plan, {"h100", 0}, gpus("x", 1, 1)).at(0) == "h100/0: the plan's cluster has no subcluster 'h100'");
  CHECK(job::check_offer(plan, {"v100", 1}, gpus("Tesla V100", 16, 1)).at(0) == "v100/1: the plan runs nothing on this node");
}

TEST_CASE("GPUs as CUDA names them match the catalog's device types by whole words, then by memory") {
  CHECK(job::is_model("A100-40GB", "NVIDIA A100-SXM4-40GB"));
  CHECK(job::is_model("H100-SXM-80GB", "NVIDIA H100 80GB HBM3"));
  CHECK(job::is_model("RTX-3080Ti", "NVIDIA GeForce RTX 3080 Ti"));
  CHECK(job::is_model("GH200-96GB", "NVIDIA GH200 480GB"));
  CHECK_FALSE(job::is_model("H200-141GB", "NVIDIA GH200 480GB"));  // not a word of it
  CHECK_FALSE(job::is_model("H20-96GB", "NVIDIA H200"));
  CHECK_FALSE(job::is_model("H200-141GB", "NVIDIA H20"));
  CHECK_FALSE(job::is_model("RTX-3090", "NVIDIA GeForce RTX 3080 Ti"));
  CHECK_FALSE(job::is_model("A100-40GB", "NVIDIA A800-SXM4-80GB"));
  // Every type of the shipped catalog, against the names the CUDA runtime reports.
  const auto& catalog = test::catalog();
  const double GiB = double(1 << 30);
  const std::vector<std::tuple<std::string, double, std::string>> seen = {
      {"NVIDIA A100-SXM4-40GB", 39.4, "A100-40GB"},       {"NVIDIA A100-SXM4-80GB", 79.2, "A100-80GB"},
      {"NVIDIA A100 80GB PCIe", 79.2, "A100-80GB"},       {"NVIDIA A800-SXM4-80GB", 79.3, "A800-80GB"},
      {"Tesla V100-SXM2-16GB", 15.8, "V100-16GB"},        {"Tesla V100-SXM2-32GB", 31.7, "V100-32GB"},
      {"NVIDIA H100 80GB HBM3", 79.1, "H100-SXM-80GB"},   {"NVIDIA H800", 79.1, "H800-80GB"},
      {"NVIDIA H20", 95.0, "H20-96GB"},                   {"NVIDIA H200", 139.8, "H200-141GB"},
      {"NVIDIA GH200 480GB", 94.5, "GH200-96GB"},         {"NVIDIA GeForce RTX 4090", 23.6, "RTX-4090"},
      {"NVIDIA GeForce RTX 3090", 23.7, "RTX-3090"},      {"NVIDIA GeForce RTX 3080 Ti", 11.8, "RTX-3080Ti"},
      {"NVIDIA GeForce RTX 2080", 7.8, ""},
  };
  for (const auto& [name, gib, want] : seen) {
    INFO(name);
    CHECK(job::catalog_type(name, gib * GiB, catalog) == want);
  }
}
