#include <catch2/catch.hpp>

#include "spec/catalog.hpp"
#include "test_util.hpp"

using namespace het;

TEST_CASE("the built-in catalog has every device the design names, with sources") {
  const auto& c = test::catalog();
  for (const char* name : {"A100-40GB", "A100-80GB", "A800-80GB", "V100-16GB", "V100-32GB", "H100-SXM-80GB",
                           "H800-80GB", "H20-96GB", "H20-141GB", "H200-141GB", "RTX-3080Ti", "RTX-3090", "RTX-4090",
                           "Ascend-910B-64GB"}) {
    INFO(name);
    const auto* d = c.find(name);
    REQUIRE(d != nullptr);
    CHECK(d->device.memory > 8e9);
    CHECK(d->device.peak > 50e12);
    CHECK(d->device.mem_bandwidth > 500e9);
    CHECK(d->intra_node.bandwidth > 1e9);
    CHECK_FALSE(d->source.empty());
  }
  // Datasheet spot checks.
  CHECK(c.find("A100-40GB")->device.peak == 312e12);
  CHECK(c.find("H100-SXM-80GB")->device.peak == Approx(989e12).epsilon(0.01));
  CHECK(c.find("V100-16GB")->device.peak == 125e12);
}

TEST_CASE("the built-in catalog is the shipped configs/devices.yaml") {
  auto shipped = load_catalog(HET_SOURCE_DIR "/configs/devices.yaml");
  REQUIRE(shipped.ok());
  CHECK(shipped->devices.size() == test::catalog().devices.size());
}

TEST_CASE("a catalog rejects repeated names and missing facts") {
  auto d = test::doc(R"(format: hetplan.devices/v1
devices:
  - {name: X, memory: 1GiB, peak: 1TFLOPS, mem_bandwidth: 1GB/s, intra_node: {bandwidth: 1GB/s, latency: 1us}, source: s}
  - {name: X, memory: 1GiB, peak: 1TFLOPS, mem_bandwidth: 1GB/s, intra_node: {bandwidth: 1GB/s, latency: 1us}, source: s}
  - {name: Y, memory: 1GiB}
)",
                     "d.yaml");
  auto c = read_catalog(d);
  REQUIRE_FALSE(c.ok());
  auto msg = test::text(c.errors());
  CHECK_THAT(msg, Catch::Contains("d.yaml:4:12: devices[1].name: device 'X' is listed twice"));
  CHECK_THAT(msg, Catch::Contains("devices[2].peak: missing required field"));
}
