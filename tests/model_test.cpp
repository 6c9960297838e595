#include <catch2/catch.hpp>

#include "spec/model.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
const char* kLlama = R"(name: llama2-7b
architecture: llama
num_layers: 32
hidden_size: 4096
num_attention_heads: 32
vocab_size: 32000
seq_length: 4096
training:
  global_batch_size: 512
)";

Result<ModelSpec> read(const std::string& text) {
  auto d = test::doc(text, "m.yaml");
  return read_model(d.file, d.root, "");
}
}  // namespace

TEST_CASE("a minimal llama model reads with documented defaults") {
  auto m = read(kLlama);
  REQUIRE(m.ok());
  CHECK(m->num_kv_heads == 32);
  CHECK(m->ffn_hidden_size == 11008);  // 8/3*4096 rounded up to 256, as Llama 2 7B
  CHECK(m->dtype == DType::bf16);
  CHECK(m->training.micro_batch_sizes == std::vector<int>{1, 2, 4, 8});
  CHECK(m->training.zero_stage == 1);
  CHECK(m->training.recompute.size() == 3);
  // Llama 2 7B has 6.74B parameters.
  CHECK(parameter_count(*m) == Approx(6.74e9).epsilon(0.01));
}

TEST_CASE("a gpt model counts GPT-2 style parameters") {
  auto m = read(R"(name: gpt2
architecture: gpt
num_layers: 12
hidden_size: 768
num_attention_heads: 12
vocab_size: 50257
seq_length: 1024
training: {global_batch_size: 8}
)");
  REQUIRE(m.ok());
  CHECK(m->ffn_hidden_size == 3072);
  CHECK(parameter_count(*m) == 124439808);  // GPT-2 small, tied embeddings
}

TEST_CASE("model semantics: heads, kv-heads, batch divisibility") {
  auto bad = read(std::string(kLlama).replace(std::string(kLlama).find("num_attention_heads: 32"), 23,
                                              "num_attention_heads: 30\nnum_kv_heads: 4"));
  REQUIRE_FALSE(bad.ok());
  auto text = test::text(bad.errors());
  CHECK_THAT(text, Catch::Contains("num_attention_heads: hidden_size 4096 is not divisible by num_attention_heads 30"));
  CHECK_THAT(text, Catch::Contains("num_kv_heads: num_attention_heads 30 is not divisible by num_kv_heads 4"));

  auto batch = read(std::string(kLlama) + "  micro_batch_sizes: [3, 5]\n");
  REQUIRE_FALSE(batch.ok());
  CHECK_THAT(test::text(batch.errors()), Catch::Contains("not divisible by any of the micro_batch_sizes"));
}

TEST_CASE("every problem in a model file is reported at once") {
  auto m = read("name: x\narchitecture: transformer\nnum_layers: 0\nhidden_size: big\nvocab: 3\ntraining: {}\n");
  REQUIRE_FALSE(m.ok());
  auto text = test::text(m.errors());
  CHECK_THAT(text, Catch::Contains("m.yaml:2:15: architecture: expected one of gpt, llama"));
  CHECK_THAT(text, Catch::Contains("m.yaml:3:13: num_layers: expected a whole number at least 1"));
  CHECK_THAT(text, Catch::Contains("m.yaml:4:14: hidden_size"));
  CHECK_THAT(text, Catch::Contains("m.yaml:5:1: vocab: unknown field; did you mean 'vocab_size'?"));
  CHECK_THAT(text, Catch::Contains("training.global_batch_size: missing required field"));
}

TEST_CASE("a model survives to_json and reading back") {
  auto m = read(kLlama);
  REQUIRE(m.ok());
  auto d = test::doc(to_json(*m).dump(), "m.json");
  auto back = read_model(d.file, d.root, "");
  REQUIRE(back.ok());
  CHECK(to_json(*back) == to_json(*m));
}
