// hetplan sweep's parts (libplan/sweep): the values a --vary gives, and the documents it makes.
#include <catch2/catch.hpp>

#include <yaml-cpp/yaml.h>

#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "sweep/report.hpp"
#include "sweep/vary.hpp"

using namespace het;

namespace {
const std::string kSrc = HET_SOURCE_DIR;

std::string first_error(const Diagnostics& d) { return d.empty() ? "" : d.front().to_string(); }
}  // namespace

TEST_CASE("sweep: --vary lists and ranges give the values, spaced as documented") {
  auto list = sweep::parse_vary("links[0].bandwidth=1Gbit/s,10Gbit/s,100Gbit/s");
  REQUIRE(list);
  CHECK(list->path == "links[0].bandwidth");
  CHECK(list->values == std::vector<std::string>{"1Gbit/s", "10Gbit/s", "100Gbit/s"});
  CHECK(list->numbers == std::vector<double>{1, 10, 100});
  CHECK(list->unit == "Gbit/s");
  CHECK_FALSE(list->ratio);

  // A range over two decades: a constant ratio, both ends exact.
  auto ratio = sweep::parse_vary("links[0].bandwidth=0.5Gbit/s..100Gbit/s/5");
  REQUIRE(ratio);
  CHECK(ratio->ratio);
  REQUIRE(ratio->numbers.size() == 5);
  CHECK(ratio->numbers.front() == 0.5);
  CHECK(ratio->numbers.back() == 100);
  for (std::size_t k = 1; k + 1 < ratio->numbers.size(); ++k)
    CHECK(ratio->numbers[k] / ratio->numbers[k - 1] == Approx(ratio->numbers[k + 1] / ratio->numbers[k]).epsilon(1e-4));
  CHECK(ratio->values.back() == "100Gbit/s");

  // Whole numbers without /N: each of them.
  auto nodes = sweep::parse_vary("subclusters[v100].nodes=0..4");
  REQUIRE(nodes);
  CHECK(nodes->values == std::vector<std::string>{"0", "1", "2", "3", "4"});
  auto even = sweep::parse_vary("subclusters[1].nodes=0..4/3");
  REQUIRE(even);
  CHECK(even->values == std::vector<std::string>{"0", "2", "4"});

  auto prefixed = sweep::parse_vary("cluster.name=a,b");
  REQUIRE(prefixed);
  CHECK(prefixed->path == "name");
  CHECK(prefixed->target == sweep::Target::cluster);
  CHECK(prefixed->numbers.empty());
}

TEST_CASE("sweep: a bad --vary is refused with a sentence that names it") {
  for (auto [text, says] : {std::pair{"links[0].bandwidth", "expected PATH=V1,V2"},
                            std::pair{"=1,2", "expected PATH"},
                            std::pair{"subclusters[1].nodes=0..4/4", "are not whole numbers"},  // 0, 1.33, ...: never rounded
                            std::pair{"x=1Gbit/s..10GB/s", "different units"},
                            std::pair{"x=5..1", "above its low end"},
                            std::pair{"x=1..2/1", "2 to 1000 points"},
                            std::pair{"x=a..b", "numbers"},
                            std::pair{"x=1,,2", "empty value"},
                            std::pair{"links[0.bandwidth=1", "[INDEX] or [NAME]"},
                            std::pair{"links[0]=1", "a field, not a list entry, last"}}) {
    INFO(text);
    auto v = sweep::parse_vary(text);
    REQUIRE_FALSE(v);
    CHECK_THAT(first_error(v.errors()), Catch::Contains("--vary") && Catch::Contains(says));
  }
}

TEST_CASE("sweep: apply sets one field of a copy, removes a subcluster at 0 nodes, and names what is missing") {
  const std::string file = kSrc + "/configs/clusters/hapt-4x8a100-4x8v100.yaml";
  const YAML::Node root = YAML::LoadFile(file);
  auto catalog = builtin_catalog();
  REQUIRE(catalog);

  auto faster = sweep::apply(root, file, "links[0].bandwidth", "50Gbit/s");
  REQUIRE(faster);
  auto c = read_cluster(file, *faster, "", *catalog);
  REQUIRE(c);
  CHECK(c->links.front().link.bandwidth == Approx(50e9 / 8));
  CHECK(root["links"][0]["bandwidth"].as<std::string>() == "5Gbit/s");  // the original is untouched

  auto two = sweep::apply(root, file, "subclusters[v100].nodes", "2");
  REQUIRE(two);
  auto c2 = read_cluster(file, *two, "", *catalog);
  REQUIRE(c2);
  CHECK(c2->find("v100")->nodes == 2);

  auto none = sweep::apply(root, file, "subclusters[v100].nodes", "0");
  REQUIRE(none);
  auto c0 = read_cluster(file, *none, "", *catalog);
  REQUIRE(c0);
  CHECK(c0->subclusters.size() == 1);
  CHECK(c0->subclusters.front().name == "a100");
  CHECK(c0->links.empty());

  // A value the reader refuses is its error, as for a file.
  auto odd = sweep::apply(root, file, "subclusters[1].nodes", "1.5");
  REQUIRE(odd);
  auto bad = read_cluster(file, *odd, "", *catalog);
  REQUIRE_FALSE(bad);
  CHECK_THAT(first_error(bad.errors()), Catch::Contains("subclusters[1].nodes"));

  for (auto [path, says] : {std::pair{"links[0].bandwith", "has no field 'bandwith' (it has: between, bandwidth, latency)"},
                            std::pair{"links[3].bandwidth", "has 1 entries; there is no [3]"},
                            std::pair{"subclusters[h100].nodes", "has no entry named 'h100' (a100, v100)"},
                            std::pair{"name.x", "is not a map"}}) {
    INFO(path);
    auto r = sweep::apply(root, file, path, "1");
    REQUIRE_FALSE(r);
    CHECK_THAT(first_error(r.errors()), Catch::Contains("hapt-4x8a100-4x8v100.yaml:") && Catch::Contains(says));
  }
}

TEST_CASE("sweep: the path's document is the one that has its first field") {
  const YAML::Node model = YAML::Load("name: m\nnum_layers: 4\ntraining: {global_batch_size: 8}\n");
  const YAML::Node cluster = YAML::Load("name: c\nsubclusters: []\nlinks: []\n");
  CHECK(*sweep::target_of(*sweep::parse_vary("training.global_batch_size=8,16"), &model, cluster) == sweep::Target::model);
  CHECK(*sweep::target_of(*sweep::parse_vary("links[0].bandwidth=1,2"), &model, cluster) == sweep::Target::cluster);
  auto both = sweep::target_of(*sweep::parse_vary("name=a,b"), &model, cluster);
  REQUIRE_FALSE(both);
  CHECK_THAT(first_error(both.errors()), Catch::Contains("write model.name or cluster.name"));
  auto neither = sweep::target_of(*sweep::parse_vary("bandwidth=1,2"), &model, cluster);
  REQUIRE_FALSE(neither);
  CHECK_THAT(first_error(neither.errors()), Catch::Contains("neither the model nor the cluster"));
  auto hf = sweep::target_of(*sweep::parse_vary("num_layers=2,4"), nullptr, cluster);
  REQUIRE_FALSE(hf);
  CHECK_THAT(first_error(hf.errors()), Catch::Contains("neither"));
}
