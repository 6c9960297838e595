#include "program/shards.hpp"

#include <algorithm>

namespace het::program {

Slice Slice::whole(std::vector<std::int64_t> shape) {
  Slice s{std::move(shape)};
  s.rows = s.shape.size() == 2 ? s.shape[0] : 1, s.cols = s.full_cols();
  return s;
}
Slice Slice::row_block(std::vector<std::int64_t> shape, std::int64_t row0, std::int64_t n) {
  Slice s = whole(std::move(shape));
  s.row0 = row0, s.rows = n;
  return s;
}
Slice Slice::column_block(std::vector<std::int64_t> shape, std::int64_t col0, std::int64_t n) {
  Slice s = whole(std::move(shape));
  s.col0 = col0, s.cols = n;
  return s;
}

std::int64_t Slice::common(const Slice& o) const {
  auto overlap = [](std::int64_t a0, std::int64_t an, std::int64_t b0, std::int64_t bn) {
    return std::max<std::int64_t>(0, std::min(a0 + an, b0 + bn) - std::max(a0, b0));
  };
  return overlap(row0, rows, o.row0, o.rows) * overlap(col0, cols, o.col0, o.cols);
}

std::vector<Piece> layer_pieces(const ModelSpec& m, int layer, int rank, int tp) {
  const bool gpt = m.architecture == Architecture::gpt;
  const std::int64_t C = m.hidden_size, D = m.hidden_size / m.num_attention_heads, F = m.ffn_hidden_size;
  const std::int64_t HD = m.num_attention_heads * D, KD = m.num_kv_heads * D;
  const std::int64_t Hs = HD / tp, KHs = KD / tp, Fs = F / tp;  // this shard's query, key-value and MLP rows
  const std::int64_t q0 = rank * Hs, kv0 = rank * KHs, f0 = rank * Fs;
  const std::string at = "layer" + std::to_string(layer) + ".";
  using S = Slice;
  // Column-parallel weights hold rows of [out, C], row-parallel ones columns of [C, in].
  if (gpt)
    return {{at + "ln1_w", S::whole({C})},
            {at + "ln1_b", S::whole({C})},
            {at + "wq", S::row_block({HD, C}, q0, Hs)},
            {at + "bq", S::column_block({HD}, q0, Hs)},
            {at + "wk", S::row_block({KD, C}, kv0, KHs)},
            {at + "bk", S::column_block({KD}, kv0, KHs)},
            {at + "wv", S::row_block({KD, C}, kv0, KHs)},
            {at + "bv", S::column_block({KD}, kv0, KHs)},
            {at + "wo", S::column_block({C, HD}, q0, Hs)},
            {at + "bo", S::whole({C})},
            {at + "ln2_w", S::whole({C})},
            {at + "ln2_b", S::whole({C})},
            {at + "wfc", S::row_block({F, C}, f0, Fs)},
            {at + "bfc", S::column_block({F}, f0, Fs)},
            {at + "wproj", S::column_block({C, F}, f0, Fs)},
            {at + "bproj", S::whole({C})}};
  return {{at + "ln1_w", S::whole({C})},
          {at + "wq", S::row_block({HD, C}, q0, Hs)},
          {at + "wk", S::row_block({KD, C}, kv0, KHs)},
          {at + "wv", S::row_block({KD, C}, kv0, KHs)},
          {at + "wo", S::column_block({C, HD}, q0, Hs)},
          {at + "ln2_w", S::whole({C})},
          {at + "wgate", S::row_block({F, C}, f0, Fs)},
          {at + "wdown", S::column_block({C, F}, f0, Fs)},
          {at + "wup", S::row_block({F, C}, f0, Fs)}};
}

std::vector<Piece> stage_pieces(const ModelSpec& m, int first, int last, int rank, int tp) {
  const bool gpt = m.architecture == Architecture::gpt;
  const std::int64_t C = m.hidden_size, V = m.vocab_size, T = m.seq_length;
  const int L = m.num_layers;
  const bool embedding = first == 0, head = last == L + 1;
  std::vector<Piece> out;
  if (embedding || (head && gpt)) out.push_back({"wte", Slice::whole({V, C})});  // gpt's head: the tied embedding
  if (embedding && gpt) out.push_back({"wpe", Slice::whole({T, C})});
  for (int u = std::max(first, 1); u <= std::min(last, L); ++u) {
    auto layer = layer_pieces(m, u - 1, rank, tp);
    out.insert(out.end(), std::make_move_iterator(layer.begin()), std::make_move_iterator(layer.end()));
  }
  if (head) {
    out.push_back({"lnf_w", Slice::whole({C})});
    if (gpt) out.push_back({"lnf_b", Slice::whole({C})});
    else out.push_back({"wout", Slice::whole({V, C})});
  }
  return out;
}

}  // namespace het::program
