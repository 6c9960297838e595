// HexiScale's phase-1 graph partition (libplan/search/partition): METIS cuts the cluster's
// nodes into parts of balanced compute along the slow links (min-cut) or the fast ones (max-cut).
#include <catch2/catch.hpp>

#include <chrono>

#include "search/partition.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"

using namespace het;

namespace {
SubclusterSpec sub(const std::string& name, const std::string& type, int nodes, int per_node, double inter_gbs) {
  auto catalog = builtin_catalog();
  REQUIRE(catalog.ok());
  const auto* d = catalog->find(type);
  REQUIRE(d);
  SubclusterSpec s;
  s.name = name, s.device = d->device, s.nodes = nodes, s.devices_per_node = per_node, s.intra_node = d->intra_node;
  s.inter_node = LinkSpec{inter_gbs * 1e9, 10e-6};
  return s;
}
ClusterSpec two(int nodes_a, const std::string& type_b, int nodes_b) {
  ClusterSpec c;
  c.name = "t";
  c.subclusters = {sub("a", "A100-40GB", nodes_a, 8, 25), sub("b", type_b, nodes_b, 8, 25)};
  c.links = {{"a", "b", LinkSpec{1e9, 100e-6}}};
  return c;
}
}  // namespace

TEST_CASE("min-cut keeps the fast links inside the parts, max-cut puts them between") {
  const ClusterSpec c = two(2, "A100-40GB", 2);
  auto min = search::partition_nodes(c, search::all_nodes(c), 2, false);
  REQUIRE(min.ok());
  for (const auto& p : min->parts) {
    REQUIRE(p.size() == 2);
    CHECK(p[0].sub == p[1].sub);  // a subcluster per part
  }
  CHECK(min->cut_bandwidth == Approx(4e9));  // the four slow links
  CHECK(min->imbalance == Approx(1));
  auto max = search::partition_nodes(c, search::all_nodes(c), 2, true);
  REQUIRE(max.ok());
  for (const auto& p : max->parts) {
    REQUIRE(p.size() == 2);
    CHECK(p[0].sub != p[1].sub);  // a node of each subcluster per part
  }
  CHECK(max->cut_bandwidth == Approx(2 * 25e9 + 2 * 1e9));
}

TEST_CASE("parts balance compute power, not node counts") {
  // One A100 node (8 × 312 TFLOPS) against four V100 nodes (8 × 125 TFLOPS each).
  const ClusterSpec c = two(1, "V100-16GB", 4);
  auto p = search::partition_nodes(c, search::all_nodes(c), 2, false, 1.1);
  REQUIRE(p.ok());
  std::size_t a_part = p->parts[0][0].sub == 0 ? 0 : 1;
  CHECK(p->parts[a_part].size() <= 2);  // the A100 node goes with at most one V100 node
  CHECK(p->imbalance < 1.2);
}

TEST_CASE("partitioning refuses impossible part counts and handles k = 1 and k = nodes") {
  const ClusterSpec c = two(2, "A100-40GB", 2);
  CHECK_FALSE(search::partition_nodes(c, search::all_nodes(c), 0, false).ok());
  CHECK_FALSE(search::partition_nodes(c, search::all_nodes(c), 5, false).ok());
  auto one = search::partition_nodes(c, search::all_nodes(c), 1, false);
  REQUIRE(one.ok());
  CHECK(one->parts.size() == 1);
  CHECK(one->parts[0].size() == 4);
  CHECK(one->cut_bandwidth == 0);
  auto each = search::partition_nodes(c, search::all_nodes(c), 4, true, 3.0);  // a node per part, no METIS
  REQUIRE(each.ok());
  for (const auto& p : each->parts) CHECK(p.size() == 1);
}

TEST_CASE("ten thousand devices of 8 types (1250 nodes) partition into 16 in well under a second") {
  ClusterSpec c;
  c.name = "big";
  const char* types[] = {"A100-40GB", "A100-80GB", "H100-SXM-80GB", "V100-16GB", "A100-40GB", "H100-SXM-80GB", "V100-16GB", "A100-80GB"};
  for (int t = 0; t < 8; ++t) c.subclusters.push_back(sub("s" + std::to_string(t), types[t], t < 2 ? 157 : 156, 8, 25));
  c.default_link = LinkSpec{2e9, 1e-3};
  auto nodes = search::all_nodes(c);
  REQUIRE(nodes.size() == 1250);
  const auto t0 = std::chrono::steady_clock::now();
  auto p = search::partition_nodes(c, nodes, 16, false, 1.05);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(p.ok());
  CHECK(p->parts.size() == 16);
  CHECK(p->imbalance < 1.1);
  CHECK(s < 5);
  WARN("1250 nodes into 16 parts: " << s << " s, imbalance " << p->imbalance);
}
