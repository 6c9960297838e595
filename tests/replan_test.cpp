// Re-planning (libplan/replan): the cluster less lost nodes and devices, and the bytes a switch
// between two plans moves, against closed forms from the parameters' shards.
#include <catch2/catch.hpp>

#include "program/shards.hpp"
#include "replan/replan.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "test_util.hpp"

using namespace het;
using replan::Device;
using replan::Route;

namespace {
ClusterSpec tiny_cpu() {
  auto catalog = builtin_catalog();
  REQUIRE(catalog.ok());
  auto c = load_cluster(HET_SOURCE_DIR "/configs/clusters/tiny-cpu.yaml", *catalog);
  REQUIRE(c.ok());
  return *c;
}
ModelSpec tiny_gpt() {
  auto m = load_model(HET_SOURCE_DIR "/configs/models/tiny-gpt.yaml");
  REQUIRE(m.ok());
  REQUIRE(m->training.zero_stage == 0);
  return *m;
}
std::string refused(const ClusterSpec& c, const std::vector<std::string>& removals) {
  auto r = replan::without(c, removals);
  REQUIRE_FALSE(r.ok());
  return r.errors()[0].to_string();
}
// The reduced cluster reads back as a cluster: it validates.
void reads_back(const ClusterSpec& c) {
  auto catalog = builtin_catalog();
  REQUIRE(catalog.ok());
  const std::string text = to_json(c).dump();
  auto doc = YAML::Load(text);
  auto again = read_cluster("reduced", doc, "", *catalog);
  INFO((again ? "" : test::text(again.errors())));
  CHECK(again.ok());
}
std::int64_t elements(const std::vector<program::Piece>& pieces) {
  std::int64_t n = 0;
  for (const auto& p : pieces) n += p.slice.elements();
  return n;
}
// A one-pipeline plan of stages (subcluster, first, last, tp, devices of node 0).
Plan plan_of(const ClusterSpec& c, const std::vector<std::tuple<std::string, int, int, int, std::vector<int>>>& stages) {
  Plan p;
  p.model = tiny_gpt();
  p.cluster = c;
  Pipeline pl;
  pl.micro_batch_size = 2, pl.num_microbatches = 8;
  for (const auto& [sub, first, last, tp, devices] : stages) {
    Stage s;
    s.subcluster = sub, s.first = first, s.last = last, s.tp = tp;
    for (int d : devices) s.devices.push_back({0, d});
    pl.stages.push_back(s);
  }
  p.pipelines.push_back(pl);
  return p;
}
}  // namespace

TEST_CASE("replan: a cluster without a device splits its node off, without a node renumbers, and both validate") {
  const ClusterSpec c = tiny_cpu();
  auto one = replan::without(c, {"fast/0:1"});
  REQUIRE(one.ok());
  REQUIRE(one->cluster.subclusters.size() == 2);
  CHECK(one->cluster.subclusters[0].name == "fast-n0");
  CHECK(one->cluster.subclusters[0].devices_per_node == 1);
  CHECK(one->cluster.link_between("fast-n0", "slow").bandwidth == c.link_between("fast", "slow").bandwidth);
  REQUIRE(one->old_of.size() == 3);
  CHECK(one->old_of[0].first == Device{"fast-n0", 0, 0});
  CHECK(one->old_of[0].second == Device{"fast", 0, 0});
  reads_back(one->cluster);

  auto node = replan::without(c, {"slow/0"});
  REQUIRE(node.ok());
  REQUIRE(node->cluster.subclusters.size() == 1);
  CHECK(node->cluster.subclusters[0].name == "fast");
  reads_back(node->cluster);

  // Three nodes of two: losing node 1 renumbers node 2; losing one device of node 0 splits it off,
  // linked to the rest by the subcluster's inter-node link.
  ClusterSpec big = c;
  big.subclusters[0].nodes = 3;
  big.subclusters[0].inter_node = LinkSpec{1.25e9, 5e-6};
  auto gone = replan::without(big, {"fast/1"});
  REQUIRE(gone.ok());
  CHECK(gone->cluster.subclusters[0].nodes == 2);
  bool renumbered = false;
  for (const auto& [now, was] : gone->old_of) renumbered = renumbered || (now == Device{"fast", 1, 0} && was == Device{"fast", 2, 0});
  CHECK(renumbered);
  reads_back(gone->cluster);
  auto split = replan::without(big, {"fast/0:1"});
  REQUIRE(split.ok());
  REQUIRE(split->cluster.find("fast-n0"));
  CHECK(split->cluster.find("fast")->nodes == 2);
  CHECK(split->cluster.link_between("fast", "fast-n0").bandwidth == 1.25e9);
  reads_back(split->cluster);

  CHECK_THAT(refused(c, {"gpu/0"}), Catch::Contains("--without gpu/0: no subcluster 'gpu'"));
  CHECK_THAT(refused(c, {"fast/1"}), Catch::Contains("expected a node from 0 to 0"));
  CHECK_THAT(refused(c, {"fast/0:2"}), Catch::Contains("expected a device from 0 to 1"));
  CHECK_THAT(refused(c, {"fast"}), Catch::Contains("expected SUB/NODE or SUB/NODE:DEVICE"));
  CHECK_THAT(refused(c, {"fast/x"}), Catch::Contains("expected a node"));
  CHECK_THAT(refused(c, {"fast/0", "slow/0"}), Catch::Contains("removes every device"));
}

TEST_CASE("replan: a switch moves what a device lacks, from the fastest surviving holder, else from the checkpoint") {
  const ClusterSpec c = tiny_cpu();
  const ModelSpec m = tiny_gpt();
  const int L = m.num_layers;
  const std::int64_t kB = 12;  // fp32 value and two moments per element

  SECTION("tp 2 on one node loses a device: the lost half comes from the checkpoint, the rest stays") {
    const Plan old = plan_of(c, {{"fast", 0, L + 1, 2, {0, 1}}});
    auto reduced = replan::without(c, {"fast/0:1"});
    REQUIRE(reduced.ok());
    const Plan now = plan_of(reduced->cluster, {{"fast-n0", 0, L + 1, 1, {0}}});
    auto s = replan::switch_between(old, now, *reduced);
    REQUIRE(s.ok());
    const std::int64_t whole = elements(program::stage_pieces(m, 0, L + 1, 0, 1));
    const std::int64_t kept = elements(program::stage_pieces(m, 0, L + 1, 0, 2));
    CHECK(s->bytes_by_route[int(Route::in_place)] == kept * kB);
    CHECK(s->bytes_by_route[int(Route::checkpoint)] == (whole - kept) * kB);
    CHECK(s->bytes_by_route[int(Route::intra_node)] == 0);
    REQUIRE(s->transfers.size() == 1);
    CHECK_FALSE(s->transfers[0].from);
    CHECK(s->predicted_s == 0);  // nothing over a link
  }
  SECTION("a pipeline of two stages onto its first device: the second stage's layers and norm cross the node, the tied wte stays") {
    const Plan old = plan_of(c, {{"fast", 0, 2, 1, {0}}, {"fast", 3, L + 1, 1, {1}}});
    auto reduced = replan::without(c, {"slow/0"});
    REQUIRE(reduced.ok());
    const Plan now = plan_of(reduced->cluster, {{"fast", 0, L + 1, 1, {0}}});
    auto s = replan::switch_between(old, now, *reduced);
    REQUIRE(s.ok());
    const std::int64_t moved = elements(program::layer_pieces(m, 2, 0, 1)) + elements(program::layer_pieces(m, 3, 0, 1)) +
                               2 * m.hidden_size;  // layers 2, 3 (units 3, 4), lnf_w, lnf_b
    CHECK(s->bytes_by_route[int(Route::intra_node)] == moved * kB);
    CHECK(s->bytes_by_route[int(Route::checkpoint)] == 0);
    REQUIRE(s->transfers.size() == 1);
    CHECK(*s->transfers[0].from == Device{"fast", 0, 1});
    CHECK(s->received(Device{"fast", 0, 0}) == moved * kB);
    const LinkSpec intra = c.subclusters[0].intra_node;
    CHECK(s->predicted_s == Approx(intra.latency + double(moved * kB) / intra.bandwidth));
  }
  SECTION("two holders: the one on the same node, not the one across subclusters") {
    Plan old = plan_of(c, {{"fast", 0, L + 1, 1, {1}}});
    Pipeline second = old.pipelines[0];
    second.stages[0].subcluster = "slow", second.stages[0].devices = {{0, 0}};
    old.pipelines.push_back(second);
    const auto reduced = replan::matched(c, c);
    const Plan now = plan_of(c, {{"fast", 0, L + 1, 1, {0}}});
    auto s = replan::switch_between(old, now, reduced);
    REQUIRE(s.ok());
    CHECK(s->bytes_by_route[int(Route::inter_subcluster)] == 0);
    CHECK(s->bytes_by_route[int(Route::intra_node)] == elements(program::stage_pieces(m, 0, L + 1, 0, 1)) * kB);
  }
  SECTION("ZeRO plans are refused as unsupported, saying why") {
    Plan old = plan_of(c, {{"fast", 0, L + 1, 1, {0}}});
    old.model.training.zero_stage = 1;
    auto s = replan::switch_between(old, old, replan::matched(c, c));
    REQUIRE_FALSE(s.ok());
    CHECK(s.errors()[0].kind == ErrorKind::unsupported);
    CHECK_THAT(s.errors()[0].message, Catch::Contains("ZeRO-0 plans only"));
  }
}
