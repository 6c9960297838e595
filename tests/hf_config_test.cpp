// Hugging Face config.json files as models (libplan/spec/hf_config.hpp; issue 22): the shipped
// configs read as the published models (their parameter counts to the parameter), and a config
// hetplan cannot model is refused naming the field, with its file and line.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "process.hpp"
#include "spec/hf_config.hpp"

using namespace het;

namespace {

const std::string kHf = std::string(HET_SOURCE_DIR) + "/configs/hf/";

// The first error's text ("file:line:column: field: message"), or "" when it read.
std::string first_error(const Result<ModelSpec>& m) { return m ? std::string() : m.errors().front().to_string(); }

const char* kTraining = "seq_length: 4096\ntraining:\n  global_batch_size: 512\n";

}  // namespace

TEST_CASE("hf configs: the shipped ones read as the published models, to the parameter") {
  struct Case {
    const char* dir;
    const char* training;
    Architecture arch;
    int layers, hidden, heads, kv, ffn, vocab;
    std::int64_t parameters;  // the model card's count (Qwen2: without its q/k/v biases, which hetplan does not model)
  };
  const Case cases[] = {
      {"gpt2", "training-1k.yaml", Architecture::gpt, 12, 768, 12, 12, 3072, 50257, 124'439'808},
      {"llama-2-7b", "training-4k.yaml", Architecture::llama, 32, 4096, 32, 32, 11008, 32000, 6'738'415'616},
      {"llama-3-8b", "training-4k.yaml", Architecture::llama, 32, 4096, 32, 8, 14336, 128256, 8'030'261'248},
      {"mistral-7b", "training-4k.yaml", Architecture::llama, 32, 4096, 32, 8, 14336, 32000, 7'241'732'096},
      {"qwen2-7b", "training-4k.yaml", Architecture::llama, 28, 3584, 28, 4, 18944, 152064, 7'615'616'512 - 129'024},
  };
  for (const Case& c : cases) {
    INFO(c.dir);
    std::vector<std::string> notes;
    auto m = load_model(kHf + c.dir, kHf + c.training, &notes);  // the directory, as users give it
    REQUIRE(first_error(m) == "");
    CHECK(m->name == c.dir);
    CHECK(m->architecture == c.arch);
    CHECK(m->num_layers == c.layers);
    CHECK(m->hidden_size == c.hidden);
    CHECK(m->num_attention_heads == c.heads);
    CHECK(m->num_kv_heads == c.kv);
    CHECK(m->ffn_hidden_size == c.ffn);
    CHECK(m->vocab_size == c.vocab);
    CHECK(parameter_count(*m) == c.parameters);
    CHECK(notes.size() == (std::string(c.dir) == "qwen2-7b" ? 1u : 0u));
    // The config.json itself reads the same.
    CHECK(load_model(kHf + c.dir + "/config.json", kHf + c.training).ok());
  }
}

TEST_CASE("hf configs: what hetplan cannot model is refused, naming the field, file and line") {
  test::TempDir dir;
  const std::string training = dir.write("training.yaml", kTraining);
  const std::string llama = R"({
  "model_type": "llama",
  "hidden_size": 4096,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "intermediate_size": 14336,
  "vocab_size": 32000,
  "max_position_embeddings": 8192
})";
  int files = 0;
  auto with = [&](const std::string& from, const std::string& to) {  // a config.json of its own with `from` replaced
    std::string text = llama;
    text.replace(text.find(from), from.size(), to);
    return dir.write("config-" + std::to_string(++files) + ".json", text);
  };
  struct Case {
    std::string file, error;
  };
  const Case cases[] = {
      {with("\"llama\"", "\"falcon\""), ".json:2:17: model_type: 'falcon' is not a model hetplan plans"},
      {with("  \"intermediate_size\": 14336,\n", ""), ".json:1:1: intermediate_size: missing"},
      {with("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"), ".json:6:26: num_key_value_heads: 32 attention heads are not divisible by 5"},
      {with("\"vocab_size\": 32000", "\"vocab_size\": 32000, \"tie_word_embeddings\": true"), "tie_word_embeddings: true: hetplan's llama has an untied output projection"},
      {with("\"vocab_size\": 32000", "\"vocab_size\": 32000, \"head_dim\": 64"), "head_dim: 64 is not hidden_size / num_attention_heads = 128"},
      {with("\"vocab_size\": 32000", "\"vocab_size\": 32000, \"hidden_act\": \"gelu\""), "hidden_act: 'gelu': hetplan's llama has a SwiGLU MLP"},
      {with("\"hidden_size\": 4096", "\"hidden_size\": \"big\""), ".json:3:18: hidden_size: expected a whole number"},
  };
  for (const Case& c : cases) {
    INFO(c.error);
    CHECK_THAT(first_error(read_hf_model(c.file, training)), Catch::Contains(c.error));
  }
  // The training YAML: positions, the sliding window, the fields it may hold.
  const std::string config = with("\"vocab_size\": 32000", "\"vocab_size\": 32000");
  CHECK_THAT(first_error(read_hf_model(config, dir.write("long.yaml", "seq_length: 16384\ntraining:\n  global_batch_size: 8\n"))),
             Catch::Contains("long.yaml:1:13: seq_length: 16384 is more than the model's max_position_embeddings 8192"));
  CHECK_THAT(first_error(read_hf_model(kHf + "mistral-7b", dir.write("8k.yaml", "seq_length: 8192\ntraining:\n  global_batch_size: 8\n"))),
             Catch::Contains("seq_length: 8192 is longer than the model's sliding_window 4096"));
  CHECK_THAT(first_error(read_hf_model(config, dir.write("arch.yaml", std::string(kTraining) + "hidden_size: 12\n"))),
             Catch::Contains("arch.yaml:4:1: hidden_size: unknown field"));
  CHECK_THAT(first_error(read_hf_model(config, dir.write("none.yaml", "training:\n  global_batch_size: 8\n"))),
             Catch::Contains("seq_length"));
  // Which file needs which: a config without training fields, training fields for a model.yaml.
  CHECK_THAT(first_error(load_model(config, std::nullopt)), Catch::Contains("give its training fields"));
  CHECK_THAT(first_error(load_model(std::string(HET_SOURCE_DIR) + "/configs/models/tiny-gpt.yaml", training)),
             Catch::Contains("--training is for a Hugging Face config.json"));
}
