#include "spec/hf_config.hpp"

#include <filesystem>

#include "input/input.hpp"
#include "spec/limits.hpp"

namespace het {

namespace {

namespace fs = std::filesystem;

std::string config_file_of(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
}

// Reads fields of a config's root map, leniently: keys hetplan does not use are ignored, a JSON
// null is "absent" (transformers writes null for a default, e.g. gpt2's n_inner).
struct Config {
  input::Context ctx;
  YAML::Node root;

  bool has(const char* key) const { return root[key] && !root[key].IsNull(); }
  YAML::Node at(const char* key) const { return has(key) ? root[key] : root; }  // a missing key: the map's line
  std::optional<std::int64_t> integer(const char* key, bool required, input::Limit limit) const {
    if (!has(key)) {
      if (required) ctx.error(root, key, "missing: hetplan needs it to size the model");
      return std::nullopt;
    }
    return input::as_integer(ctx, root[key], key, 1, limit);
  }
  std::optional<std::string> text(const char* key) const { return has(key) ? input::as_string(ctx, root[key], key) : std::nullopt; }
  std::optional<bool> boolean(const char* key) const {
    if (!has(key)) return std::nullopt;
    const YAML::Node n = root[key];
    if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) return n.Scalar() == "true";
    ctx.error(n, key, "expected true or false, got " + input::describe(n));
    return std::nullopt;
  }
};

}  // namespace

bool is_hf_config(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).extension() == ".json";
}

Result<ModelSpec> read_hf_model(const std::string& path, const std::string& training_file, std::vector<std::string>* notes) {
  auto doc = input::load(config_file_of(path));
  if (!doc) return doc.errors();
  Diagnostics errors;
  const Config c{input::Context{doc->file, &errors}, doc->root};
  const auto type = c.text("model_type");
  if (!type) {
    if (!c.has("model_type")) c.ctx.error(c.root, "model_type", "missing: a transformers config.json names its model_type");
    return errors;
  }
  const bool gpt2 = *type == "gpt2", mistral = *type == "mistral", qwen2 = *type == "qwen2";
  if (!gpt2 && !mistral && !qwen2 && *type != "llama") {
    c.ctx.error(c.root["model_type"], "model_type",
                "'" + *type + "' is not a model hetplan plans: it reads gpt2 (as architecture gpt), llama, mistral and qwen2 (as llama)");
    return errors;
  }
  // The two families' names for the same dimensions (transformers' GPT2Config, LlamaConfig).
  struct Names {
    const char *layers, *hidden, *heads, *positions, *ffn, *act, *act_default;
  };
  const Names k = gpt2 ? Names{"n_layer", "n_embd", "n_head", "n_positions", "n_inner", "activation_function", "gelu_new"}
                       : Names{"num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "intermediate_size",
                               "hidden_act", "silu"};
  const auto layers = c.integer(k.layers, true, limits::kLayers);
  const auto hidden = c.integer(k.hidden, true, limits::kHiddenSize);
  const auto heads = c.integer(k.heads, true, limits::kAttentionHeads);
  const auto vocab = c.integer("vocab_size", true, limits::kVocabSize);
  const auto positions = c.integer(k.positions, true, limits::kSeqLength);
  const auto ffn = c.integer(k.ffn, !gpt2, limits::kFfnHiddenSize);  // gpt2: null means 4 x n_embd
  const auto head_dim = c.integer("head_dim", false, limits::kHiddenSize);
  std::int64_t kv = heads.value_or(1), window = 0;  // window 0: none
  if (!gpt2) kv = c.integer("num_key_value_heads", false, limits::kAttentionHeads).value_or(kv);
  if (mistral) window = c.integer("sliding_window", false, limits::kSeqLength).value_or(0);
  const std::string act = c.text(k.act).value_or(k.act_default);
  const bool gelu = act == "gelu_new" || act == "gelu" || act == "gelu_fast" || act == "gelu_pytorch_tanh";
  if (gpt2 ? !gelu : act != "silu")
    c.ctx.error(c.at(k.act), k.act,
                "'" + act + "': hetplan's " + (gpt2 ? "gpt has a GELU MLP" : "llama has a SwiGLU MLP (silu)") + ", so it cannot model this one");
  const bool tied = c.boolean("tie_word_embeddings").value_or(gpt2);  // transformers' defaults
  if (tied != gpt2)
    c.ctx.error(c.at("tie_word_embeddings"), "tie_word_embeddings",
                gpt2 ? "false: hetplan's gpt ties the output projection to the token embedding"
                     : "true: hetplan's llama has an untied output projection; a tied one is not modeled");
  if (!errors.empty()) return errors;
  if (*hidden % *heads != 0)
    c.ctx.error(c.root[k.heads], k.heads, std::to_string(*hidden) + " (" + k.hidden + ") is not divisible by " + std::to_string(*heads));
  else if (head_dim && *head_dim != *hidden / *heads)
    c.ctx.error(c.root["head_dim"], "head_dim", std::to_string(*head_dim) + " is not " + k.hidden + " / " + k.heads + " = " +
                                                    std::to_string(*hidden / *heads) + ", the only head dimension hetplan models");
  else if (!gpt2 && (*hidden / *heads) % 2 != 0)
    c.ctx.error(c.root[k.heads], k.heads, "RoPE needs an even head dimension, got " + std::to_string(*hidden / *heads));
  if (*heads % kv != 0)
    c.ctx.error(c.root["num_key_value_heads"], "num_key_value_heads",
                std::to_string(*heads) + " attention heads are not divisible by " + std::to_string(kv));
  if (!errors.empty()) return errors;

  // The training fields, and the model read as a model.yaml is (read_model's checks).
  auto train = input::load(training_file);
  if (!train) return train.errors();
  const input::Context tctx{train->file, &errors};
  const input::Fields t(tctx, train->root, "", {"name", "seq_length", "seq_lengths", "dtype", "training"});
  if (!t.is_map()) return errors;
  std::string name = c.text("_name_or_path").value_or("");
  if (name.empty()) name = fs::absolute(fs::path(doc->file)).parent_path().filename().string();
  YAML::Node m(YAML::NodeType::Map);
  m["name"] = t.has("name") ? t.get("name") : YAML::Node(name);
  m["architecture"] = gpt2 ? "gpt" : "llama";
  m["num_layers"] = *layers;
  m["hidden_size"] = *hidden;
  m["num_attention_heads"] = *heads;
  m["num_kv_heads"] = kv;
  m["ffn_hidden_size"] = ffn.value_or(4 * *hidden);
  m["vocab_size"] = *vocab;
  for (const char* key : {"seq_length", "seq_lengths", "dtype", "training"})
    if (t.has(key)) m[key] = t.get(key);
  auto model = read_model(train->file, m, "");
  if (!model) return model.errors();
  const std::string where = " (" + doc->file + ":" + std::to_string(input::line_of(c.root[k.positions])) + ")";
  if (model->seq_length > *positions)
    t.error("seq_length", std::to_string(model->seq_length) + " is more than the model's " + k.positions + " " + std::to_string(*positions) + where);
  if (window > 0 && model->seq_length > window)
    t.error("seq_length", std::to_string(model->seq_length) + " is longer than the model's sliding_window " + std::to_string(window) +
                              ": sliding-window attention is not modeled");
  if (!errors.empty()) return errors;
  // What the config has and the model leaves out.
  const bool biases = qwen2 || c.boolean("attention_bias").value_or(false);
  if (biases && notes) {
    const std::int64_t per_layer = *hidden + 2 * model->num_kv_heads * (*hidden / *heads);
    const double share = double(per_layer * *layers) / double(parameter_count(*model));
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.3f%%", 100 * share);
    notes->push_back("its q, k and v projections have biases (" + std::to_string(per_layer * *layers) + " parameters, " + pct +
                     " of the model) that hetplan's llama has not: its parameters and memory count that much less");
  }
  return model;
}

Result<ModelSpec> load_model(const std::string& file, const std::optional<std::string>& training, std::vector<std::string>* notes) {
  if (is_hf_config(file)) {
    if (!training)
      return Diagnostic{file, 0, 0, "",
                        "a Hugging Face config: give its training fields (seq_length, dtype, training) with --training F.yaml "
                        "(docs/inputs.md)"};
    return read_hf_model(file, *training, notes);
  }
  std::error_code ec;
  if (training && fs::exists(file, ec))
    return Diagnostic{*training, 0, 0, "", "--training is for a Hugging Face config.json; " + file + " is a model.yaml with its own training fields"};
  return load_model(file);
}

}  // namespace het
