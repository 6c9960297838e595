#include <catch2/catch.hpp>

#include "spec/cluster.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
Result<ClusterSpec> read(const std::string& text) {
  auto d = test::doc(text, "c.yaml");
  return read_cluster(d.file, d.root, "", test::catalog());
}

const char* kTwo = R"(name: a100-v100
subclusters:
  - name: a100
    device: A100-40GB
    nodes: 4
    devices_per_node: 8
    inter_node: {bandwidth: 200Gbit/s, latency: 5us}
  - name: v100
    device: {type: V100-16GB, memory: 15GiB}
    nodes: 4
    devices_per_node: 8
    intra_node: {bandwidth: 150GB/s, latency: 3us}
    inter_node: {bandwidth: 100Gbit/s, latency: 5us}
links:
  - {between: [a100, v100], bandwidth: 5Gbit/s, latency: 1ms}
)";
}  // namespace

TEST_CASE("catalog devices resolve, with overrides and the catalog's intra-node link") {
  auto c = read(kTwo);
  REQUIRE(c.ok());
  REQUIRE(c->subclusters.size() == 2);
  const auto& a100 = c->subclusters[0];
  CHECK(a100.device.memory == test::catalog().find("A100-40GB")->device.memory);
  CHECK(a100.device.peak == 312e12);
  CHECK(a100.intra_node.bandwidth == test::catalog().find("A100-40GB")->intra_node.bandwidth);
  CHECK(a100.inter_node->bandwidth == 25e9);
  const auto& v100 = c->subclusters[1];
  CHECK(v100.device.memory == 15.0 * (1 << 30));  // overridden
  CHECK(v100.device.peak == test::catalog().find("V100-16GB")->device.peak);  // from the catalog
  CHECK(v100.intra_node.bandwidth == 150e9);
  CHECK(c->num_devices() == 64);
  CHECK(c->link_between("v100", "a100").bandwidth == 625e6);
  CHECK(c->link_between("a100", "v100").latency == Approx(1e-3));
}

TEST_CASE("a cluster needs a link for every pair, or a default link") {
  std::string text = R"(name: three
subclusters:
  - {name: a, device: A100-80GB, nodes: 1, devices_per_node: 2}
  - {name: b, device: H800-80GB, nodes: 1, devices_per_node: 2}
  - {name: c, device: H20-96GB, nodes: 1, devices_per_node: 2}
links:
  - {between: [a, b], bandwidth: 10Gbit/s, latency: 1ms}
)";
  auto missing = read(text);
  REQUIRE_FALSE(missing.ok());
  auto msg = test::text(missing.errors());
  CHECK_THAT(msg, Catch::Contains("no link between subclusters a and c"));
  CHECK_THAT(msg, Catch::Contains("no link between subclusters b and c"));
  auto with_default = read(text + "default_link: {bandwidth: 1Gbit/s, latency: 2ms}\n");
  REQUIRE(with_default.ok());
  CHECK(with_default->link_between("c", "a").bandwidth == 125e6);
  CHECK(with_default->link_between("a", "b").bandwidth == 1.25e9);
}

TEST_CASE("cluster semantics: names, endpoints, repeated links, inter-node links") {
  auto c = read(R"(name: bad
subclusters:
  - {name: a, device: A100-80GB, nodes: 2, devices_per_node: 8}
  - {name: a, device: H800-80GB, nodes: 1, devices_per_node: 8}
  - {name: x/y, device: H800-80GB, nodes: 1, devices_per_node: 8}
links:
  - {between: [a, zz], bandwidth: 10Gbit/s, latency: 1ms}
  - {between: [a, a], bandwidth: 10Gbit/s, latency: 1ms}
)");
  REQUIRE_FALSE(c.ok());
  auto msg = test::text(c.errors());
  CHECK_THAT(msg, Catch::Contains("c.yaml:3:5: subclusters[0].inter_node: missing required field"));
  CHECK_THAT(msg, Catch::Contains("c.yaml:4:12: subclusters[1].name: subcluster name 'a' is already used at line 3"));
  CHECK_THAT(msg, Catch::Contains("subclusters[2].name: subcluster names use letters"));
  CHECK_THAT(msg, Catch::Contains("c.yaml:7:19: links[0].between[1]: unknown subcluster 'zz'"));
  CHECK_THAT(msg, Catch::Contains("links[1].between: a link joins two different subclusters"));
}

TEST_CASE("a device outside the catalog must be spelled out") {
  auto c = read("name: x\nsubclusters:\n  - {name: a, device: TPU-v9, nodes: 1, devices_per_node: 4}\n");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(test::text(c.errors()), Catch::Contains("device type 'TPU-v9' is not in the device catalog"));
  auto partial = read(
      "name: x\nsubclusters:\n  - {name: a, device: {type: chip-A, memory: 64GiB}, nodes: 1, devices_per_node: 4,"
      " intra_node: {bandwidth: 100GB/s, latency: 2us}}\n");
  REQUIRE_FALSE(partial.ok());
  CHECK_THAT(test::text(partial.errors()), Catch::Contains("subclusters[0].device.peak: missing required field"));
  auto full = read(
      "name: x\nsubclusters:\n  - {name: a, device: {type: chip-A, memory: 64GiB, peak: 280TFLOPS, mem_bandwidth: "
      "1.6TB/s}, nodes: 1, devices_per_node: 4, intra_node: {bandwidth: 100GB/s, latency: 2us}}\n");
  REQUIRE(full.ok());
  CHECK(full->subclusters[0].device.peak == 280e12);
}

TEST_CASE("a cluster survives to_json and reading back") {
  auto c = read(kTwo);
  REQUIRE(c.ok());
  auto d = test::doc(to_json(*c).dump(), "c.json");
  auto back = read_cluster(d.file, d.root, "", test::catalog());
  REQUIRE(back.ok());
  CHECK(to_json(*back) == to_json(*c));
  CHECK(back->subclusters[1].device.memory == c->subclusters[1].device.memory);
}
