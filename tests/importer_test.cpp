#include <catch2/catch.hpp>

#include "importer/importer.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
ModelSpec opt350() {
  auto m = load_model(HET_SOURCE_DIR "/configs/models/opt-350m.yaml");
  REQUIRE(m.ok());
  return *m;
}
const ProfileRow* find(const ProfileSpec& p, UnitKind u, int tp, int mbs) {
  for (const auto& r : p.units)
    if (r.unit == u && r.tp == tp && r.micro_batch_size == mbs) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("Sailor profiles import: embedding, median block, head, optimizer step, memory from llm_info") {
  importer::Options o{"sailor", HET_SOURCE_DIR "/tests/data/sailor/OPT-350/A100-40", opt350(), {},
                      std::string(HET_SOURCE_DIR "/tests/data/sailor/llm_info.json")};
  auto p = importer::import_profile(o);
  INFO((p ? "" : test::text(p.errors())));
  REQUIRE(p.ok());
  CHECK(p->device == "A100-40GB");
  CHECK(p->model.hidden_size == 1024);
  const ProfileRow* layer = find(*p, UnitKind::layer, 1, 1);
  REQUIRE(layer != nullptr);
  // profile.json "1" -> "1" (micro-batch 1, tp 1): the median of blocks 1..24.
  CHECK(layer->forward == Approx(0.002314));
  CHECK(layer->backward == Approx(0.005909));
  const ProfileRow* head = find(*p, UnitKind::head, 1, 1);
  REQUIRE(head != nullptr);
  CHECK(head->forward == Approx(0.004508));
  // llm_info: block params_floats 12596224 in fp16 -> 25.2 MB.
  CHECK(layer->parameter_memory.value() == Approx(12596224.0 * 2));
  CHECK(p->optimizer_step.value() == Approx(0.001512));  // median update time over all blocks and shapes
  // The YAML we write reads back to the same rows.
  auto text = importer::to_yaml(*p, "test");
  auto back = read_profile(test::doc(text, "p.yaml"));
  REQUIRE(back.ok());
  REQUIRE(back->units.size() == p->units.size());
  CHECK(find(*back, UnitKind::layer, 1, 1)->forward == Approx(0.002314));
}

TEST_CASE("Metis profiles import with forward:backward split 1:2") {
  importer::Options o{"metis", HET_SOURCE_DIR "/tests/data/metis/OPT-350/A100-40", opt350(), {"A100-40GB"}, {}};
  auto p = importer::import_profile(o);
  INFO((p ? "" : test::text(p.errors())));
  REQUIRE(p.ok());
  CHECK(p->units.size() == 3 * 4);  // embedding, layer, head for mbs 1,2 x tp 1,2
  const ProfileRow* layer = find(*p, UnitKind::layer, 1, 1);
  REQUIRE(layer != nullptr);
  CHECK(layer->forward + layer->backward == Approx(8.223e-3));
  CHECK(layer->backward == Approx(2 * layer->forward));
}

TEST_CASE("import errors name the file") {
  importer::Options o{"sailor", HET_SOURCE_DIR "/tests/data/nothing-here", opt350(), {}, {}};
  auto p = importer::import_profile(o);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.errors()[0].to_string(), Catch::Contains("nothing-here/profile.json: cannot open the file"));
  importer::Options m{"metis", HET_SOURCE_DIR "/tests/data/sailor", opt350(), {}, {}};
  auto q = importer::import_profile(m);
  REQUIRE_FALSE(q.ok());
  CHECK_THAT(q.errors()[0].message, Catch::Contains("no mbs<b>_tmp<t>.json files"));
}

TEST_CASE("the shipped OPT-350M profiles are valid and serve the model") {
  for (const char* gpu : {"a100-40", "a100-80", "v100-16", "gh-96", "rtx-3090"}) {
    INFO(gpu);
    auto p = load_profile(std::string(HET_SOURCE_DIR "/profiles/opt-350m/") + gpu + ".profile.yaml");
    REQUIRE(p.ok());
    CHECK(profile_mismatch(*p, opt350()).empty());
    CHECK(test::catalog().find(p->device) != nullptr);
  }
}
