// Feeds: any bytes as a cluster file (cluster.yaml: input::parse, then read_cluster of the root
// with the built-in device catalog).
// Checks: no crash, hang or unbounded memory; a refusal names the file; an accepted cluster's
// device count and every pair's link are answered, and to_json(cluster) reads back to the same
// cluster (cluster.hpp: "read_cluster() reads it back").
#include "fuzz.hpp"
#include "spec/cluster.hpp"

using namespace het;

namespace {
// The built-in catalog, parsed once (read-only after the first input).
const DeviceCatalog& catalog() {
  static const DeviceCatalog c = *builtin_catalog();
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "cluster.yaml");
  if (!doc) return 0;
  auto cluster = read_cluster(doc->file, doc->root, "", catalog());
  if (!cluster) {
    fuzz::require_explained(cluster.errors(), "cluster.yaml");
    return 0;
  }
  fuzz::require(cluster->num_devices() > 0, "a valid cluster has devices");
  for (const auto& a : cluster->subclusters)
    for (const auto& b : cluster->subclusters)
      if (a.name != b.name) fuzz::require(cluster->link_between(a.name, b.name).bandwidth > 0, "every pair has a link");
  fuzz::require_round_trip(
      to_json(*cluster).dump(1), [](const input::Document& d) { return read_cluster(d.file, d.root, "", catalog()); },
      [](const ClusterSpec& c) { return to_json(c).dump(1); }, "to_json(cluster) reads back to the same cluster");
  return 0;
}
