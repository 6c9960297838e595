#include <catch2/catch.hpp>

#include "importer/importer.hpp"
#include "spec/profile.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
const char* kProfile = R"(format: hetplan.profile/v1
device: A100-40GB
model: {architecture: gpt, hidden_size: 1024, num_attention_heads: 16, seq_length: 2048}
units:
  - {unit: layer, tp: 1, cp: 1, micro_batch_size: 1, forward: 1.9ms, backward: 3.4ms,
     recompute: 1.9ms, activation_memory: 344MiB, parameter_memory: 48MiB}
  - {unit: layer, tp: 2, micro_batch_size: 1, forward: 1.1ms, backward: 1.9ms}
  - {unit: embedding, tp: 1, cp: 1, micro_batch_size: 1, forward: 0.8ms, backward: 0.01ms}
  - {unit: head, tp: 1, cp: 1, micro_batch_size: 1, forward: 2.1ms, backward: 4.0ms}
optimizer_step: 1.5ms
links:
  intra_node: {latency: 3us, bandwidth: 250GB/s}
)";
}

TEST_CASE("the profile format of the design reads") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  CHECK(p->device == "A100-40GB");
  REQUIRE(p->units.size() == 4);
  CHECK(p->units[0].forward == Approx(1.9e-3));
  CHECK(p->units[0].activation_memory.value() == 344.0 * (1 << 20));
  CHECK(p->units[0].seq_length == 2048);
  CHECK(p->units[0].line == 5);
  CHECK(p->units[1].cp == 1);
  CHECK_FALSE(p->units[1].recompute.has_value());
  CHECK(p->optimizer_step.value() == Approx(1.5e-3));
  CHECK(p->links.at(LinkClass::intra_node).bandwidth == 250e9);
}

TEST_CASE("a profile rejects two rows of the same shape") {
  std::string text = std::string(kProfile) + "";
  text.insert(text.find("optimizer_step"),
              "  - {unit: layer, tp: 2, cp: 1, micro_batch_size: 1, forward: 1ms, backward: 2ms}\n");
  auto p = read_profile(test::doc(text, "p.yaml"));
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(test::text(p.errors()), Catch::Contains("units[4]: a layer row with tp 2, cp 1, micro_batch_size 1 and "
                                                     "seq_length 2048 is already given at line 7"));
}

TEST_CASE("a profile for another model shape is named as such") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  ModelSpec m;
  m.architecture = Architecture::gpt;
  m.hidden_size = 4096;
  m.num_attention_heads = 16;
  CHECK_THAT(profile_mismatch(*p, m), Catch::Contains("hidden_size 1024 (model: 4096)"));
  m.hidden_size = 1024;
  CHECK(profile_mismatch(*p, m).empty());  // a profile without the optional dimensions checks only these
  // A profile that records kv heads, MLP width and vocabulary is held to them, each by name.
  m.num_kv_heads = 16, m.ffn_hidden_size = 4096, m.vocab_size = 32000, m.seq_length = 2048;
  ProfileSpec full = *p;
  full.model = profile_model(m);
  CHECK(profile_mismatch(full, m).empty());
  m.num_kv_heads = 4, m.ffn_hidden_size = 2048, m.vocab_size = 50257;
  const std::string why = profile_mismatch(full, m);
  CHECK_THAT(why, Catch::Contains("num_kv_heads 16 (model: 4)") && Catch::Contains("ffn_hidden_size 4096 (model: 2048)") &&
                      Catch::Contains("vocab_size 32000 (model: 50257)"));
  // Written by the importer's writer and read back, the dimensions survive.
  auto back = read_profile(test::doc(importer::to_yaml(full, "test"), "back.yaml"));
  REQUIRE(back.ok());
  CHECK(back->model.num_kv_heads == 16);
  CHECK(back->model.ffn_hidden_size == 4096);
  CHECK(back->model.vocab_size == 32000);
}
