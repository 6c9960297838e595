#pragma once
// Where a rank's parameters sit in the model's full tensors (issue 19): one description, used
// by the executor to build, seed, save and load a rank's parameters (libexec/model) and by the
// planner to count what a switch from one plan to another moves (hetplan replan).
//
// Units as in plans: 0 the embedding, 1..L the transformer layers, L+1 the head. A stage of
// units [first, last] holds, as TP shard `rank` of `tp` (Megatron's split, model/block.hpp):
//   embedding  wte [V, C], and gpt's wpe [T, C]
//   layer l    (names "layer<l-1>.") ln1_w [C], wq/wk/wv rows of [H·D, C] / [KH·D, C] (its
//              query / key-value heads), wo columns of [C, H·D], ln2_w [C], the MLP's input
//              rows of [F, C] (gpt: wfc, llama: wgate and wup), its output columns of [C, F]
//              (gpt: wproj, llama: wdown); gpt adds ln1_b, bq/bk/bv (the heads' elements),
//              bo [C], ln2_b, bfc (its channels), bproj [C]
//   head       lnf_w [C]; gpt: lnf_b [C] and the tied wte [V, C]; llama: wout [V, C]
// Every TP shard holds the whole of each vector and of the embedding and head tensors (they are
// not split); context members and data-parallel replicas hold what their TP shard holds.
#include <cstdint>
#include <string>
#include <vector>

#include "spec/model.hpp"

namespace het::program {

// Where a shard's elements sit in the full (unsharded) tensor: the full tensor's shape, [n] or
// [rows, cols], and the box the shard holds — rows [row0, row0 + rows) × columns
// [col0, col0 + cols) of its [rows, cols] view (a vector is one row) — stored row-major.
struct Slice {
  std::vector<std::int64_t> shape;
  std::int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;

  // The whole tensor; rows [row0, row0 + n) of a matrix; columns [col0, col0 + n) of a matrix
  // or elements [col0, col0 + n) of a vector.
  static Slice whole(std::vector<std::int64_t> shape);
  static Slice row_block(std::vector<std::int64_t> shape, std::int64_t row0, std::int64_t n);
  static Slice column_block(std::vector<std::int64_t> shape, std::int64_t col0, std::int64_t n);

  std::int64_t full_cols() const { return shape.back(); }
  std::int64_t elements() const { return rows * cols; }
  // The index in the full tensor (row-major) of local element i.
  std::int64_t global(std::int64_t i) const { return (row0 + i / cols) * full_cols() + col0 + i % cols; }
  // Elements both hold (slices of the same tensor).
  std::int64_t common(const Slice& other) const;
};

struct Piece {
  std::string name;  // e.g. "layer3.wq"
  Slice slice;
};

// Layer `layer` (0-based) as TP shard `rank` of `tp`, in the order a block keeps them: gpt
// ln1_w ln1_b wq bq wk bk wv bv wo bo ln2_w ln2_b wfc bfc wproj bproj; llama ln1_w wq wk wv wo
// ln2_w wgate wdown wup. Precondition: tp divides the heads, the key-value heads and the MLP
// channels (validated plans do).
std::vector<Piece> layer_pieces(const ModelSpec& model, int layer, int rank, int tp);
// Everything a stage of units [first, last] holds as TP shard `rank` of `tp`, in the order the
// executor's stage lists its parameters: wte, wpe, the layers in order, lnf_w, lnf_b, wout.
std::vector<Piece> stage_pieces(const ModelSpec& model, int first, int last, int rank, int tp);

}  // namespace het::program
