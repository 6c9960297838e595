#pragma once
// One pipeline stage's share of the model on one device: a contiguous range of units
// (embedding, transformer layers, head; granularity `layer`) as tensor-parallel shard
// `rank` of `tp`. Forward and backward run one micro-batch at a time and keep each
// in-flight micro-batch's activations until its backward, as pipeline schedules need.
// With context parallelism every tensor below holds T/cp time steps (comm.cp_rank's slice).
//   embedding: tokens[B,T] -> x[B,T,C]        (wte, + wpe for gpt; replicated over TP)
//   layers:    x[B,T,C] -> x[B,T,C]           (TP-sharded blocks)
//   head:      x[B,T,C] -> loss over targets  (final norm, logits = x·Wᵀ with W = wte for gpt
//              — tied; its copy on a head-only stage is kept equal by the runtime — or wout)
// Weights come from (seed, name, index), so every plan starts from the same model.
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "model/block.hpp"
#include "spec/model.hpp"

namespace het::model {

template <class T>
class StageModel {
 public:
  // Units [first, last] of the layer-granular sequence: 0 embedding, 1..L layers, L+1 head.
  // `comm` connects it to the other shards of its TP and CP groups.
  StageModel(const ModelSpec& spec, int first, int last, int tp_rank, int tp, std::uint64_t seed, Comm<T> comm = {});

  // Activation recomputation: `full` keeps only a micro-batch's input between forward and
  // backward, and the backward first runs the forward again; `selective` keeps everything but
  // the layers' attention cores, which the backward computes again (Block::set_selective).
  void set_recompute(Recompute r) {
    recompute_ = r;
    for (auto& b : blocks_) b.set_selective(r == Recompute::selective);
  }

  bool has_embedding() const { return first_ == 0; }
  bool has_head() const { return last_ == shape_.L + 1; }

  // Forward of micro-batch `mb` of B sequences: from tokens (first stage) or activations
  // x[B,T,C]; returns the output activations [B,T,C], or, on the last stage, nothing (the
  // summed token losses are in `loss_sum`, the logits kept for backward).
  std::vector<T> forward(int mb, int B, const int* tokens, const T* x, const int* targets, double* loss_sum);
  // Backward of micro-batch `mb`: from the output gradient dy[B,T,C] (not on the last stage,
  // where the loss gradient is scaled by `loss_scale`, 1 / the global batch's tokens);
  // returns dx[B,T,C] (empty on the first stage). Accumulates parameter gradients.
  std::vector<T> backward(int mb, const T* dy, double loss_scale);

  // Every parameter of the stage (blocks' and embedding/head ones), for the optimizer,
  // gradient sync and checkpoints. Order is deterministic.
  std::vector<Param<T>*> params();
  void zero_grad();
  // Bytes of activations kept for the micro-batches in flight (between forward and backward).
  std::size_t activation_bytes() const;
  // The most activation_bytes() has been since construction, including a recomputing stage's
  // forward again inside its backward (that micro-batch's whole set, held until it ends).
  std::size_t activation_bytes_peak() const { return activation_peak_; }

 private:
  struct Acts {
    int B = 0;
    bool dropped = false;                     // recomputation: only the input below is kept
    std::vector<T> input;
    std::vector<int> tokens, targets;
    std::vector<T> embedded;                  // input of the first block
    std::vector<BlockActs<T>> blocks;
    std::vector<T> head_in, normed, mean, rstd, logits;
  };
  Shape shape_;
  int first_, last_;
  Comm<T> comm_;
  int Tl_;  // time steps held: T / cp
  std::vector<Block<T>> blocks_;
  std::optional<Param<T>> wte_, wpe_, lnf_w_, lnf_b_, wout_;  // as held by this stage
  std::map<int, Acts> in_flight_;
  std::size_t activation_peak_ = 0;
  Recompute recompute_ = Recompute::none;
  // The forward proper, filling `a`; returns the output (empty on the last stage).
  std::vector<T> run_forward(Acts& a, const T* x, double* loss_sum);
};

}  // namespace het::model
