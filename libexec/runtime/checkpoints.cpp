#include "runtime/checkpoints.hpp"

#include <algorithm>

namespace het::runtime {

namespace {

using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

// The local elements of part elements [i0, i1) of a chunk, as contiguous ranges in order.
Ranges local_ranges(const Elements& e, std::size_t i0, std::size_t i1) {
  Ranges out;
  for (std::size_t k = i0; k < i1;) {
    const std::size_t n = std::min(e.run - k % e.run, i1 - k);
    out.emplace_back(std::int64_t(e.index(k)), std::int64_t(n));
    k += n;
  }
  return out;
}

// Calls f(part, i0, i1) for the owned elements [i0, i1) of every part of the bucket.
template <class F>
void for_owned(const Bucket& b, F&& f) {
  for (const auto& p : b.parts) {
    const std::size_t lo = std::max(b.lo, p.at), hi = std::min(b.hi, p.at + p.chunk.elements.size());
    if (lo < hi) f(p, lo - p.at, hi - p.at);
  }
}

}  // namespace

std::string resume_problem(const checkpoint::Checkpoint& from, const ModelSpec& model) {
  const nlohmann::json want = to_json(model);
  if (!from.manifest().contains("model") || !from.manifest()["model"].is_object())
    return "the checkpoint " + from.dir() + " does not say which model it holds (its manifest has no model)";
  const nlohmann::json& had = from.manifest()["model"];
  for (const char* key : {"architecture", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
                          "vocab_size", "seq_length"})
    if (had.value(key, nlohmann::json()) != want[key])
      return "the checkpoint " + from.dir() + " holds a model with " + key + " " + had.value(key, nlohmann::json()).dump() +
             "; this one has " + want[key].dump();
  const auto batch = had.contains("training") ? had["training"].value("global_batch_size", nlohmann::json()) : nlohmann::json();
  if (batch != want["training"]["global_batch_size"])
    return "the checkpoint " + from.dir() + " was trained with global_batch_size " + batch.dump() + "; this model has " +
           want["training"]["global_batch_size"].dump() + ", so its step " + std::to_string(from.step()) + " would read other sequences";
  return "";
}

replan::Route route_between(const std::string& from, const std::string& to) {
  using replan::Route;
  if (from == to) return Route::in_place;
  const auto node = [](const std::string& d) { return d.substr(0, d.rfind(':')); };
  const auto sub = [&](const std::string& d) { return node(d).substr(0, node(d).rfind('/')); };
  if (node(from) == node(to)) return Route::intra_node;
  return sub(from) == sub(to) ? Route::inter_node : Route::inter_subcluster;
}

std::vector<checkpoint::PieceOut> checkpoint_pieces(const std::vector<Bucket>& buckets, int rank, bool zero, bool everything) {
  std::vector<checkpoint::PieceOut> out;
  for (const auto& b : buckets) {
    if (!zero && !everything && b.group.front() != rank) continue;  // the group's first rank writes it whole
    for_owned(b, [&](const Bucket::Part& p, std::size_t i0, std::size_t i1) {
      const model::Param<float>& param = *p.param;
      checkpoint::PieceOut piece{param.name, param.slice.shape, {}, {}, {}, {}};
      const Ranges ranges = local_ranges(p.chunk.elements, i0, i1);
      piece.spans = checkpoint::spans_of(param.slice, ranges);
      for (auto [first, n] : ranges) piece.value.insert(piece.value.end(), param.value.begin() + first, param.value.begin() + first + n);
      const std::size_t at = p.at + i0 - b.lo;  // the piece's first moment
      piece.m.assign(b.m.begin() + std::ptrdiff_t(at), b.m.begin() + std::ptrdiff_t(at + (i1 - i0)));
      piece.v.assign(b.v.begin() + std::ptrdiff_t(at), b.v.begin() + std::ptrdiff_t(at + (i1 - i0)));
      out.push_back(std::move(piece));
    });
  }
  return out;
}

Result<Done> load_checkpoint(const checkpoint::Checkpoint& from, const std::vector<model::Param<float>*>& params,
                             std::vector<Bucket>& buckets) {
  for (auto* p : params) {
    const auto spans = checkpoint::spans_of(p->slice, {{0, std::int64_t(p->value.size())}});
    if (auto got = from.read(p->name, p->slice.shape, checkpoint::Field::value, spans, p->value.data()); !got) return got;
  }
  for (auto& b : buckets) {
    Result<Done> status = Done{};
    for_owned(b, [&](const Bucket::Part& p, std::size_t i0, std::size_t i1) {
      if (!status) return;
      const model::Param<float>& param = *p.param;
      const auto spans = checkpoint::spans_of(param.slice, local_ranges(p.chunk.elements, i0, i1));
      const std::size_t at = p.at + i0 - b.lo;
      status = from.read(param.name, param.slice.shape, checkpoint::Field::m, spans, b.m.data() + at);
      if (status) status = from.read(param.name, param.slice.shape, checkpoint::Field::v, spans, b.v.data() + at);
    });
    if (!status) return status;
  }
  return Done{};
}

}  // namespace het::runtime
