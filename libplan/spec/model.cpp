#include "spec/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "spec/limits.hpp"

namespace het {

using input::Need;

const char* to_string(Architecture a) { return a == Architecture::gpt ? "gpt" : "llama"; }
const char* to_string(DType d) {
  switch (d) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
  }
  return "?";
}
const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}
int dtype_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

static std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

static const input::Choices<Recompute> kRecomputeChoices = {
    {"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}};

static TrainingSpec read_training(const input::Fields& t) {
  const auto& ctx = t.context();
  TrainingSpec training;
  auto gbs = t.integer("global_batch_size", Need::required, 1, limits::kGlobalBatchSize);
  training.global_batch_size = static_cast<int>(gbs.value_or(0));

  if (auto list = t.list("micro_batch_sizes", Need::optional, limits::kMicroBatchChoices)) {
    if (list->size() == 0) t.error("micro_batch_sizes", "expected at least one micro-batch size");
    std::set<int> seen;
    for (std::size_t i = 0; i < list->size(); ++i) {
      auto v = input::as_integer(ctx, (*list)[i], input::index(t.path_of("micro_batch_sizes"), i), 1, limits::kGlobalBatchSize);
      if (!v) continue;
      if (!seen.insert(static_cast<int>(*v)).second)
        ctx.error((*list)[i], input::index(t.path_of("micro_batch_sizes"), i), "micro-batch size listed twice");
      training.micro_batch_sizes.push_back(static_cast<int>(*v));
    }
  } else if (!t.has("micro_batch_sizes")) {
    for (int b : {1, 2, 4, 8})
      if (gbs && *gbs % b == 0) training.micro_batch_sizes.push_back(b);
  }
  if (gbs && !training.micro_batch_sizes.empty() &&
      std::none_of(training.micro_batch_sizes.begin(), training.micro_batch_sizes.end(),
                   [&](int b) { return *gbs % b == 0; })) {
    t.error("global_batch_size", "global batch size " + std::to_string(*gbs) +
                                     " is not divisible by any of the micro_batch_sizes");
  }

  t.choice<std::string>("optimizer", Need::optional, {{"adamw", "adamw"}});
  training.zero_stage = static_cast<int>(t.integer("zero_stage", Need::optional, 0, 3).value_or(1));
  if (auto list = t.list("recompute", Need::optional, limits::kRecomputeChoices)) {
    if (list->size() == 0) t.error("recompute", "expected at least one of none, selective, full");
    for (std::size_t i = 0; i < list->size(); ++i) {
      std::string p = input::index(t.path_of("recompute"), i);
      auto r = input::as_choice(ctx, (*list)[i], p, kRecomputeChoices);
      if (!r) continue;
      if (std::find(training.recompute.begin(), training.recompute.end(), *r) != training.recompute.end())
        ctx.error((*list)[i], p, "recompute option listed twice");
      training.recompute.push_back(*r);
    }
  } else if (!t.has("recompute")) {
    training.recompute = {Recompute::none, Recompute::selective, Recompute::full};
  }
  return training;
}

Result<ModelSpec> read_model(const std::string& file, const YAML::Node& node, const std::string& path) {
  Diagnostics errors;
  input::Context ctx{file, &errors};
  input::Fields f(ctx, node, path,
                  {"name", "architecture", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                   "ffn_hidden_size", "vocab_size", "seq_length", "seq_lengths", "dtype", "training"});
  if (!f.is_map()) return errors;
  ModelSpec m;
  auto need_int = [&](const char* key, Need need, input::Limit limit) {
    return static_cast<int>(f.integer(key, need, 1, limit).value_or(0));
  };
  m.name = f.string("name", Need::required).value_or("");
  auto arch = f.choice<Architecture>("architecture", Need::required,
                                     {{"gpt", Architecture::gpt}, {"llama", Architecture::llama}});
  m.architecture = arch.value_or(Architecture::gpt);
  m.num_layers = need_int("num_layers", Need::required, limits::kLayers);
  m.hidden_size = need_int("hidden_size", Need::required, limits::kHiddenSize);
  m.num_attention_heads = need_int("num_attention_heads", Need::required, limits::kAttentionHeads);
  m.num_kv_heads = need_int("num_kv_heads", Need::optional, limits::kAttentionHeads);
  m.ffn_hidden_size = need_int("ffn_hidden_size", Need::optional, limits::kFfnHiddenSize);
  m.vocab_size = need_int("vocab_size", Need::required, limits::kVocabSize);
  m.seq_length = need_int("seq_length", Need::required, limits::kSeqLength);
  std::vector<int> bucket_lines;
  if (auto list = f.list("seq_lengths", Need::optional, limits::kSeqLengthBuckets)) {
    if (list->size() == 0) f.error("seq_lengths", "expected at least one bucket {length, share}");
    for (std::size_t i = 0; i < list->size(); ++i) {
      input::Fields b(ctx, (*list)[i], input::index(f.path_of("seq_lengths"), i), {"length", "share"});
      if (!b.is_map()) continue;
      SeqLengthBucket bucket;
      bucket.length = static_cast<int>(b.integer("length", Need::required, 1, limits::kSeqLength).value_or(0));
      bucket.share = b.number("share", Need::required, 0, 1).value_or(0);
      if (b.has("share") && bucket.share <= 0) b.error("share", "a bucket's share must be more than 0");
      if (!m.seq_lengths.empty() && bucket.length > 0 && bucket.length <= m.seq_lengths.back().length)
        b.error("length", "bucket lengths must ascend: " + std::to_string(bucket.length) + " after " +
                              std::to_string(m.seq_lengths.back().length));
      m.seq_lengths.push_back(bucket);
      bucket_lines.push_back(b.line());
    }
  }
  auto dtype = f.choice<DType>("dtype", Need::optional,
                               {{"bf16", DType::bf16}, {"fp16", DType::fp16}, {"fp32", DType::fp32}});
  m.dtype = dtype.value_or(DType::bf16);
  if (auto t = f.map("training", Need::required,
                     {"global_batch_size", "micro_batch_sizes", "optimizer", "zero_stage", "recompute"}))
    m.training = read_training(*t);
  if (!errors.empty()) return errors;

  // Defaults that depend on other fields.
  if (!f.has("num_kv_heads")) m.num_kv_heads = m.num_attention_heads;
  if (!f.has("ffn_hidden_size"))
    m.ffn_hidden_size = m.architecture == Architecture::gpt
                            ? 4 * m.hidden_size
                            : (8 * m.hidden_size / 3 + 255) / 256 * 256;

  // Semantic checks.
  // Tokens per iteration: the runtime and the cost model count them in an int.
  if (auto tokens = limits::checked_product({m.training.global_batch_size, m.seq_length});
      !tokens || *tokens > limits::kTokensPerIteration)
    f.error("seq_length", "training.global_batch_size x seq_length = " + std::to_string(m.training.global_batch_size) + " x " +
                              std::to_string(m.seq_length) + " tokens per iteration, more than the limit of " +
                              std::to_string(limits::kTokensPerIteration));
  if (!m.seq_lengths.empty()) {
    // Shares sum to 1 and give whole sequences (never rounded: the plan's micro-batches hold them).
    double sum = 0;
    for (std::size_t i = 0; i < m.seq_lengths.size(); ++i) {
      const SeqLengthBucket& b = m.seq_lengths[i];
      const std::string where = input::index(f.path_of("seq_lengths"), i);
      sum += b.share;
      if (b.length > m.seq_length)
        errors.push_back({file, bucket_lines[i], 0, where + ".length",
                          "bucket length " + std::to_string(b.length) + " is longer than seq_length " + std::to_string(m.seq_length)});
      const double sequences = b.share * m.training.global_batch_size;
      if (std::fabs(sequences - std::round(sequences)) > 1e-6 || std::round(sequences) < 1)
        errors.push_back({file, bucket_lines[i], 0, where + ".share",
                          "share " + number_text(b.share) + " of global_batch_size " +
                              std::to_string(m.training.global_batch_size) + " is " + number_text(sequences) +
                              " sequences; a bucket needs a whole number of at least 1"});
    }
    if (std::fabs(sum - 1) > 1e-6)
      f.error("seq_lengths", "the buckets' shares sum to " + number_text(sum) + ", not 1");
  }
  if (m.hidden_size % m.num_attention_heads != 0)
    f.error("num_attention_heads", "hidden_size " + std::to_string(m.hidden_size) +
                                       " is not divisible by num_attention_heads " +
                                       std::to_string(m.num_attention_heads));
  if (m.num_attention_heads % m.num_kv_heads != 0)
    f.error("num_kv_heads", "num_attention_heads " + std::to_string(m.num_attention_heads) +
                                " is not divisible by num_kv_heads " + std::to_string(m.num_kv_heads));
  if (m.architecture == Architecture::llama && m.hidden_size % m.num_attention_heads == 0 &&
      (m.hidden_size / m.num_attention_heads) % 2 != 0)
    f.error("hidden_size", "RoPE needs an even head dimension, got " +
                               std::to_string(m.hidden_size / m.num_attention_heads));
  if (!errors.empty()) return errors;
  return m;
}

Result<ModelSpec> load_model(const std::string& file) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  return read_model(doc->file, doc->root, "");
}

nlohmann::ordered_json to_json(const ModelSpec& m) {
  nlohmann::ordered_json recompute = nlohmann::ordered_json::array();
  for (auto r : m.training.recompute) recompute.push_back(to_string(r));
  nlohmann::ordered_json out = {{"name", m.name},
                                {"architecture", to_string(m.architecture)},
                                {"num_layers", m.num_layers},
                                {"hidden_size", m.hidden_size},
                                {"num_attention_heads", m.num_attention_heads},
                                {"num_kv_heads", m.num_kv_heads},
                                {"ffn_hidden_size", m.ffn_hidden_size},
                                {"vocab_size", m.vocab_size},
                                {"seq_length", m.seq_length}};
  if (!m.seq_lengths.empty()) {
    out["seq_lengths"] = nlohmann::ordered_json::array();
    for (const auto& b : m.seq_lengths) out["seq_lengths"].push_back({{"length", b.length}, {"share", b.share}});
  }
  out["dtype"] = to_string(m.dtype);
  out["training"] = {{"global_batch_size", m.training.global_batch_size},
                     {"micro_batch_sizes", m.training.micro_batch_sizes},
                     {"optimizer", m.training.optimizer},
                     {"zero_stage", m.training.zero_stage},
                     {"recompute", recompute}};
  return out;
}

std::vector<SeqLengthBucket> length_buckets(const ModelSpec& m) {
  if (!m.seq_lengths.empty()) return m.seq_lengths;
  return {{m.seq_length, 1.0}};
}

int bucket_sequences(const ModelSpec& m, std::size_t b) {
  if (m.seq_lengths.empty()) return m.training.global_batch_size;
  return static_cast<int>(std::lround(m.seq_lengths[b].share * m.training.global_batch_size));
}

double tokens_per_iteration(const ModelSpec& m) {
  const auto buckets = length_buckets(m);
  double tokens = 0;
  for (std::size_t b = 0; b < buckets.size(); ++b) tokens += double(bucket_sequences(m, b)) * buckets[b].length;
  return tokens;
}

ModelSpec at_length(const ModelSpec& m, int length) {
  ModelSpec out = m;
  out.seq_length = length;
  out.seq_lengths.clear();
  return out;
}

std::int64_t layer_parameter_count(const ModelSpec& m) {
  const std::int64_t h = m.hidden_size, f = m.ffn_hidden_size;
  if (m.architecture == Architecture::gpt)
    return 4 * h * h + 2 * h * f + 9 * h + f;  // QKV+out (with biases), 2 LayerNorms, MLP with biases
  const std::int64_t kv = h * m.num_kv_heads / m.num_attention_heads;
  return 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h;  // q, o, k, v; SwiGLU gate/up/down; 2 RMSNorms
}

std::int64_t parameter_count(const ModelSpec& m) {
  const std::int64_t h = m.hidden_size, v = m.vocab_size;
  std::int64_t embedding = v * h + (m.architecture == Architecture::gpt ? std::int64_t{m.seq_length} * h : 0);
  std::int64_t head = m.architecture == Architecture::gpt ? 2 * h : h + v * h;  // final norm (+ untied output)
  return embedding + std::int64_t{m.num_layers} * layer_parameter_count(m) + head;
}

}  // namespace het
