#pragma once
// A small checkpoint written with the project's own writers (checkpoint/checkpoint.hpp): two
// ranks, a [4, 6] tensor "w" split by columns between them and a vector "b" on rank 1. The
// checkpoint harness replaces one of its files with its input; fuzz_seeds writes its files as
// that harness's seeds.
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"

namespace het::fuzz {

// Writes the checkpoint of step 2 under `root`; returns its directory ("" on failure).
inline std::string write_base_checkpoint(const std::string& root) {
  auto piece = [](const model::Slice& s, const std::string& name) {
    checkpoint::PieceOut p{name, s.shape, checkpoint::spans_of(s, {{0, s.elements()}}), {}, {}, {}};
    for (std::int64_t i = 0; i < s.elements(); ++i) {
      const float x = float(s.global(i)) / 8;
      p.value.push_back(x), p.m.push_back(x / 10), p.v.push_back(x / 100);
    }
    return p;
  };
  auto r0 = checkpoint::write_rank(root, 2, 0, {piece(model::Slice::column_block({4, 6}, 0, 3), "w")});
  auto r1 = checkpoint::write_rank(root, 2, 1, {piece(model::Slice::column_block({4, 6}, 3, 3), "w"), piece(model::Slice::whole({5}), "b")});
  if (!r0 || !r1) return "";
  auto dir = checkpoint::commit(root, 2, {{"seed", 1}}, {*r0, *r1}, 0);
  return dir ? dir->dir : "";
}

// The files of a checkpoint, in the order the harness's first byte picks them.
inline const std::vector<std::string> kCheckpointFiles = {"manifest.json", "rank-00000.safetensors", "rank-00001.safetensors"};

}  // namespace het::fuzz
