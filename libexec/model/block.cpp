#include "model/block.hpp"

#include "model/ops.hpp"

#include <iterator>
#include <stdexcept>
#include <utility>

namespace het::model {

Shape Shape::of(const ModelSpec& m) {
  return {m.architecture,       m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.hidden_size / m.num_attention_heads,
          m.ffn_hidden_size,    m.vocab_size,  m.seq_length,          m.num_layers};
}

template <class T>
Block<T>::Block(const Shape& s, int layer, int rank, int tp, std::uint64_t seed)
    : s_(s), Hs_(s.H / tp), KHs_(s.KH / tp), Fs_(s.F / tp), params_(count) {
  // Where each piece of program::layer_pieces (its order) goes and how it starts.
  using enum Init;
  static constexpr std::pair<Index, Init> kGpt[] = {
      {ln1_w, ones},  {ln1_b, zeros}, {wq, normal}, {bq, zeros}, {wk, normal}, {bk, zeros},
      {wv, normal},   {bv, zeros},    {wo, normal_scaled_out},   {bo, zeros},  {ln2_w, ones},
      {ln2_b, zeros}, {w1, normal},   {b1, zeros},  {w2, normal_scaled_out},   {b2, zeros}};
  static constexpr std::pair<Index, Init> kLlama[] = {{ln1_w, ones}, {wq, normal}, {wk, normal},
                                                      {wv, normal},  {wo, normal_scaled_out}, {ln2_w, ones},
                                                      {w1, normal},  {w2, normal_scaled_out}, {w3, normal}};
  ModelSpec dims;  // the dimensions layer_pieces reads
  dims.architecture = s.arch, dims.hidden_size = s.C, dims.num_attention_heads = s.H, dims.num_kv_heads = s.KH;
  dims.ffn_hidden_size = s.F;
  auto pieces = program::layer_pieces(dims, layer, rank, tp);
  const bool gpt = s.arch == Architecture::gpt;
  const std::size_t n = gpt ? std::size(kGpt) : std::size(kLlama);
  if (pieces.size() != n) throw std::logic_error("layer_pieces and the block disagree on the parameters");
  for (std::size_t i = 0; i < n; ++i) {
    const auto [index, init] = gpt ? kGpt[i] : kLlama[i];
    Param<T>& q = params_[index];
    q.name = std::move(pieces[i].name);
    q.slice = std::move(pieces[i].slice);
    initialise(q, seed, init, s.L);
  }
}

// A member's part of the collective is [2][B,Tl,KD], keys then values.
template <class T>
void gather_seen(const T* k, const T* v, int B, int Tl, int KD, const Comm<T>& c, std::vector<T>& k_seen,
                 std::vector<T>& v_seen) {
  const std::size_t n = std::size_t(B) * Tl * KD, row = std::size_t(Tl) * KD;
  std::vector<T> part(2 * n), all(2 * n * std::size_t(c.cp));  // [2][B,Tl,KD], [cp][2][B,Tl,KD]
  std::copy_n(k, n, part.data()), std::copy_n(v, n, part.data() + n);
  c.cp_all_gather(part.data(), all.data(), 2 * n);
  k_seen.assign(std::size_t(B) * (c.cp_rank + 1) * row, T(0)), v_seen.assign(k_seen.size(), T(0));
  for (int b = 0; b < B; ++b)
    for (int r = 0; r <= c.cp_rank; ++r) {
      const std::size_t to = (std::size_t(b) * (c.cp_rank + 1) + r) * row, from = r * 2 * n + b * row;
      std::copy_n(all.data() + from, row, k_seen.data() + to), std::copy_n(all.data() + from + n, row, v_seen.data() + to);
    }
}
template <class T>
void scatter_seen(const T* dk_seen, const T* dv_seen, T* dk, T* dv, int B, int Tl, int KD, const Comm<T>& c) {
  const std::size_t n = std::size_t(B) * Tl * KD, row = std::size_t(Tl) * KD;
  std::vector<T> all(2 * n * std::size_t(c.cp), T(0)), mine(2 * n);  // [cp][2][B,Tl,KD], [2][B,Tl,KD]
  for (int b = 0; b < B; ++b)
    for (int r = 0; r <= c.cp_rank; ++r) {
      const std::size_t from = (std::size_t(b) * (c.cp_rank + 1) + r) * row, to = r * 2 * n + b * row;
      std::copy_n(dk_seen + from, row, all.data() + to), std::copy_n(dv_seen + from, row, all.data() + to + n);
    }
  c.cp_reduce_scatter(all.data(), mine.data(), 2 * n);
  for (std::size_t i = 0; i < n; ++i) dk[i] += mine[i], dv[i] += mine[n + i];
}

template void gather_seen(const float*, const float*, int, int, int, const Comm<float>&, std::vector<float>&, std::vector<float>&);
template void gather_seen(const double*, const double*, int, int, int, const Comm<double>&, std::vector<double>&,
                          std::vector<double>&);
template void scatter_seen(const float*, const float*, float*, float*, int, int, int, const Comm<float>&);
template void scatter_seen(const double*, const double*, double*, double*, int, int, int, const Comm<double>&);

template <class T>
void Block<T>::forward(const T* x, T* y, int B, BlockActs<T>& a, const Comm<T>& comm) const {
  const bool gpt = s_.arch == Architecture::gpt;
  const int Tl = s_.T / comm.cp, pos0 = comm.cp_rank * Tl, Tk = pos0 + Tl;
  const int N = B * Tl, C = s_.C, D = s_.D;
  const auto& all_reduce = comm.tp_all_reduce;
  const int QD = Hs_ * D, KD = KHs_ * D;
  auto size = [&](std::vector<T>& v, std::int64_t n) { v.assign(std::size_t(n), T(0)); };
  a.B = B;
  a.x.assign(x, x + std::int64_t(N) * C);
  size(a.ln1, std::int64_t(N) * C), size(a.ln1_mean, N), size(a.ln1_rstd, N);
  if (gpt) layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p(ln1_w).value.data(), p(ln1_b).value.data(), N, C);
  else rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x, p(ln1_w).value.data(), N, C);
  size(a.q, std::int64_t(N) * QD), size(a.k, std::int64_t(N) * KD), size(a.v, std::int64_t(N) * KD);
  const T* no_bias = nullptr;
  matmul_forward(a.q.data(), a.ln1.data(), p(wq).value.data(), gpt ? p(bq).value.data() : no_bias, N, C, QD);
  matmul_forward(a.k.data(), a.ln1.data(), p(wk).value.data(), gpt ? p(bk).value.data() : no_bias, N, C, KD);
  matmul_forward(a.v.data(), a.ln1.data(), p(wv).value.data(), gpt ? p(bv).value.data() : no_bias, N, C, KD);
  if (!gpt) {
    rope_forward(a.q.data(), B, Tl, Hs_, D, pos0);
    rope_forward(a.k.data(), B, Tl, KHs_, D, pos0);
  }
  if (comm.cp > 1) gather_seen(a.k.data(), a.v.data(), B, Tl, KD, comm, a.k_seen, a.v_seen);
  const T* k = comm.cp > 1 ? a.k_seen.data() : a.k.data();
  const T* v = comm.cp > 1 ? a.v_seen.data() : a.v.data();
  size(a.att, std::int64_t(B) * Hs_ * Tl * Tk), size(a.att_out, std::int64_t(N) * QD);
  attention_forward(a.att_out.data(), a.att.data(), a.q.data(), k, v, B, Tl, Tk, pos0, Hs_, KHs_, D);
  // Row-parallel output projection: partial sums, then the all-reduce, then the bias once.
  size(a.x2, std::int64_t(N) * C);
  matmul_forward(a.x2.data(), a.att_out.data(), p(wo).value.data(), no_bias, N, QD, C);
  all_reduce(a.x2.data(), a.x2.size());
  if (selective_) a.att = {}, a.att_out = {};  // recomputed by the backward
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) a.x2[std::size_t(n) * C + c] += x[std::int64_t(n) * C + c] + (gpt ? p(bo).value[c] : T(0));
  size(a.ln2, std::int64_t(N) * C), size(a.ln2_mean, N), size(a.ln2_rstd, N);
  if (gpt) layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x2.data(), p(ln2_w).value.data(), p(ln2_b).value.data(), N, C);
  else rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.x2.data(), p(ln2_w).value.data(), N, C);
  size(a.fc, std::int64_t(N) * Fs_), size(a.h, std::int64_t(N) * Fs_);
  matmul_forward(a.fc.data(), a.ln2.data(), p(w1).value.data(), gpt ? p(b1).value.data() : no_bias, N, C, Fs_);
  if (gpt) {
    gelu_forward(a.h.data(), a.fc.data(), N * Fs_);
  } else {
    size(a.up, std::int64_t(N) * Fs_);
    matmul_forward(a.up.data(), a.ln2.data(), p(w3).value.data(), no_bias, N, C, Fs_);
    swiglu_forward(a.h.data(), a.fc.data(), a.up.data(), N * Fs_);
  }
  matmul_forward(y, a.h.data(), p(w2).value.data(), no_bias, N, Fs_, C);
  all_reduce(y, std::size_t(N) * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) y[std::int64_t(n) * C + c] += a.x2[std::size_t(n) * C + c] + (gpt ? p(b2).value[c] : T(0));
}

template <class T>
void Block<T>::backward(const T* dy, T* dx, const BlockActs<T>& a, const Comm<T>& comm) {
  const bool gpt = s_.arch == Architecture::gpt;
  const int Tl = s_.T / comm.cp, pos0 = comm.cp_rank * Tl, Tk = pos0 + Tl;
  const int B = a.B, N = B * Tl, C = s_.C, D = s_.D;
  const auto& all_reduce = comm.tp_all_reduce;
  const int QD = Hs_ * D, KD = KHs_ * D;
  std::vector<T> dx2(dy, dy + std::int64_t(N) * C);  // residual path
  // MLP: y = x2 + w2 · h (+ b2)
  if (gpt)
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) p(b2).grad[c] += dy[std::int64_t(n) * C + c];
  std::vector<T> dh(std::size_t(N) * Fs_, T(0)), dfc(std::size_t(N) * Fs_, T(0));
  matmul_backward(dh.data(), p(w2).grad.data(), static_cast<T*>(nullptr), dy, a.h.data(), p(w2).value.data(), N, Fs_, C);
  std::vector<T> dln2(std::size_t(N) * C, T(0));
  if (gpt) {
    gelu_backward(dfc.data(), a.fc.data(), dh.data(), N * Fs_);
  } else {
    std::vector<T> dup(std::size_t(N) * Fs_, T(0));
    swiglu_backward(dfc.data(), dup.data(), dh.data(), a.fc.data(), a.up.data(), N * Fs_);
    matmul_backward(dln2.data(), p(w3).grad.data(), static_cast<T*>(nullptr), dup.data(), a.ln2.data(), p(w3).value.data(), N, C, Fs_);
  }
  matmul_backward(dln2.data(), p(w1).grad.data(), gpt ? p(b1).grad.data() : static_cast<T*>(nullptr), dfc.data(),
                  a.ln2.data(), p(w1).value.data(), N, C, Fs_);
  all_reduce(dln2.data(), dln2.size());  // column-parallel input gradient
  if (gpt)
    layernorm_backward(dx2.data(), p(ln2_w).grad.data(), p(ln2_b).grad.data(), dln2.data(), a.x2.data(),
                       p(ln2_w).value.data(), a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  else
    rmsnorm_backward(dx2.data(), p(ln2_w).grad.data(), dln2.data(), a.x2.data(), p(ln2_w).value.data(), a.ln2_rstd.data(), N, C);
  // Attention: x2 = x + wo · att_out (+ bo)
  if (gpt)
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) p(bo).grad[c] += dx2[std::size_t(n) * C + c];
  // Selective recomputation: the attention core again, att [B, Hs, Tl, Tk] and att_out [N, QD].
  std::vector<T> att_again, att_out_again;
  const T* att = a.att.data();
  const T* att_out = a.att_out.data();
  if (a.att.empty()) {
    att_again.assign(std::size_t(B) * Hs_ * Tl * Tk, T(0)), att_out_again.assign(std::size_t(N) * QD, T(0));
    attention_forward(att_out_again.data(), att_again.data(), a.q.data(), comm.cp > 1 ? a.k_seen.data() : a.k.data(),
                      comm.cp > 1 ? a.v_seen.data() : a.v.data(), B, Tl, Tk, pos0, Hs_, KHs_, D);
    att = att_again.data(), att_out = att_out_again.data();
  }
  std::vector<T> datt_out(std::size_t(N) * QD, T(0));
  matmul_backward(datt_out.data(), p(wo).grad.data(), static_cast<T*>(nullptr), dx2.data(), att_out, p(wo).value.data(), N, QD, C);
  std::vector<T> dq(std::size_t(N) * QD, T(0)), dk(std::size_t(N) * KD, T(0)), dv(std::size_t(N) * KD, T(0));
  if (comm.cp > 1) {
    std::vector<T> dk_seen(a.k_seen.size(), T(0)), dv_seen(a.v_seen.size(), T(0));
    attention_backward(dq.data(), dk_seen.data(), dv_seen.data(), datt_out.data(), att, a.q.data(), a.k_seen.data(),
                       a.v_seen.data(), B, Tl, Tk, pos0, Hs_, KHs_, D);
    scatter_seen(dk_seen.data(), dv_seen.data(), dk.data(), dv.data(), B, Tl, KD, comm);
  } else {
    attention_backward(dq.data(), dk.data(), dv.data(), datt_out.data(), att, a.q.data(), a.k.data(), a.v.data(), B,
                       Tl, Tk, pos0, Hs_, KHs_, D);
  }
  if (!gpt) {
    rope_backward(dq.data(), B, Tl, Hs_, D, pos0);
    rope_backward(dk.data(), B, Tl, KHs_, D, pos0);
  }
  std::vector<T> dln1(std::size_t(N) * C, T(0));
  matmul_backward(dln1.data(), p(wq).grad.data(), gpt ? p(bq).grad.data() : static_cast<T*>(nullptr), dq.data(), a.ln1.data(), p(wq).value.data(), N, C, QD);
  matmul_backward(dln1.data(), p(wk).grad.data(), gpt ? p(bk).grad.data() : static_cast<T*>(nullptr), dk.data(), a.ln1.data(), p(wk).value.data(), N, C, KD);
  matmul_backward(dln1.data(), p(wv).grad.data(), gpt ? p(bv).grad.data() : static_cast<T*>(nullptr), dv.data(), a.ln1.data(), p(wv).value.data(), N, C, KD);
  all_reduce(dln1.data(), dln1.size());
  std::copy(dx2.begin(), dx2.end(), dx);
  if (gpt)
    layernorm_backward(dx, p(ln1_w).grad.data(), p(ln1_b).grad.data(), dln1.data(), a.x.data(), p(ln1_w).value.data(),
                       a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
  else
    rmsnorm_backward(dx, p(ln1_w).grad.data(), dln1.data(), a.x.data(), p(ln1_w).value.data(), a.ln1_rstd.data(), N, C);
}

template class Block<float>;
template class Block<double>;

}  // namespace het::model
