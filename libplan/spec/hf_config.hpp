#pragma once
// A model from a Hugging Face transformers config.json (issue 22): the decoder's dimensions from
// the config, the training fields from a training YAML (docs/inputs.md, "Hugging Face configs").
//
// Contract:
//  * model_type gpt2 becomes architecture gpt (LayerNorm, GELU, learned positions, tied head);
//    llama, mistral and qwen2 become llama (RMSNorm, SwiGLU, RoPE, grouped-query attention,
//    untied head). Any other model_type is refused, naming it.
//  * The config's fields (gpt2: n_layer, n_embd, n_head, n_inner, vocab_size, n_positions;
//    the llama family: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
//    intermediate_size, vocab_size, max_position_embeddings) are read with file, line and field
//    in every error; a missing one, a wrong type or an inconsistency (heads not dividing the
//    hidden size, a head_dim other than hidden / heads, a tied head on the llama family or an
//    untied one on gpt2, an activation other than the architecture's) is refused, never
//    defaulted. Fields that do not change the cost (dropout, eps, rope_theta, token ids) are
//    ignored.
//  * The training YAML holds seq_length, seq_lengths (optional), dtype (default bf16), training (as in a model.yaml)
//    and optionally name (default: the config's _name_or_path, else its directory's name);
//    any other key is refused. seq_length may not exceed the config's positions, nor a mistral
//    sliding window (sliding-window attention is not modeled).
//  * What the model leaves out but the config has (qwen2's q/k/v biases) is said in `notes`.
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "spec/model.hpp"

namespace het {

// Whether `path` names a Hugging Face config: a .json file, or a directory holding config.json.
bool is_hf_config(const std::string& path);

// The model of the config at `path` (a config.json, or a directory holding one) with the
// training fields of `training_file`.
Result<ModelSpec> read_hf_model(const std::string& path, const std::string& training_file, std::vector<std::string>* notes = nullptr);

// A model from either kind of file: a model.yaml (then `training` must be absent: it has its
// own training fields), or a Hugging Face config with the training YAML `training` (required).
Result<ModelSpec> load_model(const std::string& file, const std::optional<std::string>& training,
                             std::vector<std::string>* notes = nullptr);

}  // namespace het
