#pragma once
// The model to train (model.yaml; schema in docs/inputs.md, DESIGN.md §4).
//
// read_model() checks the schema (every field typed, unknown keys rejected) and the
// semantics (hidden divisible by heads, heads by kv-heads, a micro-batch size that divides
// the global batch, ...), reporting every problem with file, line and field path.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/diag.hpp"
#include "input/input.hpp"

namespace het {

enum class Architecture { gpt, llama };        // gpt: LayerNorm, GELU MLP; llama: RMSNorm, SwiGLU, RoPE, GQA
enum class DType { bf16, fp16, fp32 };
enum class Recompute { none, selective, full };  // activation recomputation of a stage

const char* to_string(Architecture a);
const char* to_string(DType d);
const char* to_string(Recompute r);
int dtype_bytes(DType d);

struct TrainingSpec {
  int global_batch_size = 0;               // sequences per iteration
  std::vector<int> micro_batch_sizes;      // candidates for the planner; default {1, 2, 4, 8} ∩ divisors
  std::string optimizer = "adamw";         // only adamw for now
  int zero_stage = 1;                      // 0..3
  std::vector<Recompute> recompute;        // options the planner may choose per stage
};

// One bucket of a sequence-length distribution (Hetu v2 §7.3; Hetu-B): `share` of an
// iteration's sequences hold `length` tokens (shorter ones are padded to it).
struct SeqLengthBucket {
  int length = 0;
  double share = 0;  // in (0, 1]
  friend bool operator==(const SeqLengthBucket&, const SeqLengthBucket&) = default;
};

struct ModelSpec {
  std::string name;
  Architecture architecture = Architecture::gpt;
  int num_layers = 0;
  int hidden_size = 0;
  int num_attention_heads = 0;
  int num_kv_heads = 0;        // defaults to num_attention_heads
  int ffn_hidden_size = 0;     // defaults to 4h (gpt) or 8h/3 rounded up to a multiple of 256 (llama)
  int vocab_size = 0;
  int seq_length = 0;          // the longest sequence (gpt's position table has this many rows)
  // When sequence lengths vary (YAML `seq_lengths: [{length: 1024, share: 0.75}, ...]`): buckets
  // of ascending lengths, each at most seq_length, shares summing to 1 with share ×
  // global_batch_size whole sequences. Empty: every sequence has seq_length tokens.
  std::vector<SeqLengthBucket> seq_lengths;
  DType dtype = DType::bf16;
  TrainingSpec training;
};

// Reads a model from a document's root map (or any map node of it, e.g. a plan's "model").
Result<ModelSpec> read_model(const std::string& file, const YAML::Node& node, const std::string& path);
// load + read_model of the root.
Result<ModelSpec> load_model(const std::string& file);

// The spec in its own schema (quantities as unit strings); read_model() reads it back.
nlohmann::ordered_json to_json(const ModelSpec& model);

// The model's buckets: seq_lengths, or the single bucket {seq_length, 1}.
std::vector<SeqLengthBucket> length_buckets(const ModelSpec& model);
// Sequences of bucket `b` per iteration: its share of the global batch (whole by read_model).
int bucket_sequences(const ModelSpec& model, std::size_t b);
// Tokens per iteration: Σ over buckets of sequences × length.
double tokens_per_iteration(const ModelSpec& model);
// The model as if every sequence had `length` tokens (seq_length = length, seq_lengths
// cleared), for the time and activations of one bucket's micro-batches. Its parameter count
// is not the model's (gpt's position table shrinks): count parameters with the model itself.
ModelSpec at_length(const ModelSpec& model, int length);

// Trainable parameters: embeddings (+ learned positions for gpt), layers, final norm, and
// an untied output projection for llama (gpt ties it to the token embedding).
std::int64_t parameter_count(const ModelSpec& model);
std::int64_t layer_parameter_count(const ModelSpec& model);

}  // namespace het
