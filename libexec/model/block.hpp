#pragma once
// The transformer block, one tensor-parallel shard of it (Megatron: column-parallel
// Q/K/V and MLP-up, row-parallel attention output and MLP-down, an all-reduce after each
// row-parallel product forward and after each column-parallel input gradient backward).
//   gpt:   y = x2 + proj(gelu(fc(LN2(x2)))),           x2 = x + out(attn(qkv(LN1(x))))
//   llama: y = x2 + down(silu(gate(R2)) * up(R2)),     x2 = x + out(attn(rope(qkv(R1))))
//          with R = RMSNorm, grouped-query attention, no biases.
// x, y: [B, T, C]. A shard holds H/tp query heads, KH/tp key/value heads and F/tp MLP
// channels. With context parallelism (cp > 1) x and y hold time steps [r·T/cp, (r+1)·T/cp)
// of member r; the keys and values of the earlier members are all-gathered for attention and
// their gradients reduce-scattered back (Megatron's context parallelism, with all-gathered
// K/V rather than a ring; the result is the same). Activations of one micro-batch live in BlockActs, so several micro-batches can
// be in flight (pipeline schedules) — forward fills one, backward consumes it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/params.hpp"
#include "spec/model.hpp"

namespace het::model {

// What a shard needs from the ranks it works with, supplied by the runtime; the defaults are
// those of a rank working alone.
template <class T>
struct Comm {
  // Sums n elements in place across the tensor-parallel group.
  std::function<void(T* data, std::size_t n)> tp_all_reduce = [](T*, std::size_t) {};
  // Context parallelism: member cp_rank of cp holds time steps [cp_rank·T/cp, (cp_rank+1)·T/cp).
  int cp_rank = 0, cp = 1;
  // all[cp·n] = every member's n elements, in member order.
  std::function<void(const T* mine, T* all, std::size_t n)> cp_all_gather;
  // mine[n] = the sum over members of block cp_rank of their all[cp·n].
  std::function<void(const T* all, T* mine, std::size_t n)> cp_reduce_scatter;
};

// Context parallelism's exchanges around attention (Block's, and the CUDA backend's through host
// memory): the keys k[B,Tl,KD] and values v[B,Tl,KD] of every member, gathered in one collective
// into k_seen, v_seen [B, (cp_rank+1)·Tl, KD] — the time steps a causal query of this member can see;
// and the reverse, in one collective: the gradients dk_seen, dv_seen of the keys and values seen,
// summed over the members into this member's own dk, dv [B,Tl,KD] (+=).
template <class T>
void gather_seen(const T* k, const T* v, int B, int Tl, int KD, const Comm<T>& c, std::vector<T>& k_seen, std::vector<T>& v_seen);
template <class T>
void scatter_seen(const T* dk_seen, const T* dv_seen, T* dk, T* dv, int B, int Tl, int KD, const Comm<T>& c);

struct Shape {
  Architecture arch = Architecture::gpt;
  int C = 0, H = 0, KH = 0, D = 0, F = 0, V = 0, T = 0, L = 0;
  static Shape of(const ModelSpec& m);
};

template <class T>
struct BlockActs {
  int B = 0;
  std::vector<T> x, ln1, ln1_mean, ln1_rstd, q, k, v, att, att_out, x2, ln2, ln2_mean, ln2_rstd, fc, h, up;
  std::vector<T> k_seen, v_seen;  // cp > 1: keys and values of time steps [0, (cp_rank+1)·T/cp)
};

template <class T>
class Block {
 public:
  // Layer `layer` (0-based) as TP shard `rank` of `tp`.
  Block(const Shape& s, int layer, int rank, int tp, std::uint64_t seed);

  // y[B,T/cp,C] from x[B,T/cp,C]; fills acts.
  void forward(const T* x, T* y, int B, BlockActs<T>& acts, const Comm<T>& comm) const;
  // dx[B,T/cp,C] (overwritten) from dy; accumulates the parameter gradients.
  void backward(const T* dy, T* dx, const BlockActs<T>& acts, const Comm<T>& comm);

  std::vector<Param<T>>& params() { return params_; }
  const std::vector<Param<T>>& params() const { return params_; }

  // Selective activation recomputation (Korthikanti et al. 2022, §4.2; Megatron's
  // "selective"): the forward keeps no attention core (acts.att, acts.att_out: the scores'
  // softmax and its product with V), and the backward computes it again from q, k and v.
  void set_selective(bool selective) { selective_ = selective; }

 private:
  enum Index { ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2, w3, count };
  const Param<T>& p(Index i) const { return params_[i]; }
  Param<T>& p(Index i) { return params_[i]; }
  Shape s_;
  int Hs_, KHs_, Fs_;  // this shard's heads, kv heads, MLP channels
  std::vector<Param<T>> params_;  // by Index; unused ones (llama biases, gpt w3) are empty
  bool selective_ = false;
};

}  // namespace het::model
