#include "model/stage.hpp"

#include <stdexcept>

#include "model/ops.hpp"

namespace het::model {

template <class T>
StageModel<T>::StageModel(const ModelSpec& spec, int first, int last, int tp_rank, int tp, std::uint64_t seed, Comm<T> comm)
    : shape_(Shape::of(spec)), first_(first), last_(last), comm_(std::move(comm)), Tl_(shape_.T / comm_.cp) {
  const Shape& s = shape_;
  for (int u = std::max(first, 1); u <= std::min(last, s.L); ++u) blocks_.emplace_back(s, u - 1, tp_rank, tp, seed);
  // The embedding's and the head's tensors, where program::stage_pieces places them (gpt's head
  // holds the tied token embedding); the layers' pieces are the blocks'.
  const struct {
    const char* name;
    std::optional<Param<T>> StageModel::*member;
    Init init;
  } outer[] = {{"wte", &StageModel::wte_, Init::normal}, {"wpe", &StageModel::wpe_, Init::normal},
               {"lnf_w", &StageModel::lnf_w_, Init::ones}, {"lnf_b", &StageModel::lnf_b_, Init::zeros},
               {"wout", &StageModel::wout_, Init::normal}};
  for (auto& piece : program::stage_pieces(spec, first, last, tp_rank, tp))
    for (const auto& o : outer)
      if (piece.name == o.name) {
        Param<T>& p = (this->*o.member).emplace();
        p.name = std::move(piece.name);
        p.slice = std::move(piece.slice);
        initialise(p, seed, o.init, s.L);
      }
}

template <class T>
std::vector<T> StageModel<T>::forward(int mb, int B, const int* tokens, const T* x, const int* targets, double* loss_sum) {
  const int N = B * Tl_;
  Acts& a = in_flight_[mb];
  a = Acts{};
  a.B = B;
  if (has_embedding()) a.tokens.assign(tokens, tokens + N);
  if (has_head()) a.targets.assign(targets, targets + N);
  std::vector<T> out = run_forward(a, x, loss_sum);
  activation_peak_ = std::max(activation_peak_, activation_bytes());
  if (recompute_ == Recompute::full) {
    if (!has_embedding()) a.input.assign(x, x + std::int64_t(N) * shape_.C);
    Acts kept;
    kept.B = a.B, kept.dropped = true;
    kept.input = std::move(a.input), kept.tokens = std::move(a.tokens), kept.targets = std::move(a.targets);
    a = std::move(kept);
  }
  return out;
}

template <class T>
std::vector<T> StageModel<T>::run_forward(Acts& a, const T* x, double* loss_sum) {
  const Shape& s = shape_;
  const int B = a.B, N = B * Tl_;
  const int* targets = a.targets.data();
  std::vector<T> cur;
  if (has_embedding()) {
    cur.assign(std::size_t(N) * s.C, T(0));
    embedding_forward(cur.data(), a.tokens.data(), wte_->value.data(), wpe_ ? wpe_->value.data() : static_cast<const T*>(nullptr), N,
                      Tl_, s.C, comm_.cp_rank * Tl_);
  } else {
    cur.assign(x, x + std::int64_t(N) * s.C);
  }
  a.blocks.resize(blocks_.size());
  std::vector<T> next(cur.size());
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].forward(cur.data(), next.data(), B, a.blocks[i], comm_);
    std::swap(cur, next);
  }
  if (!has_head()) return cur;
  // Head: final norm, logits against wte (tied) or wout, cross-entropy.
  a.head_in = cur;
  a.normed.assign(cur.size(), T(0)), a.mean.assign(N, T(0)), a.rstd.assign(N, T(0));
  if (s.arch == Architecture::gpt)
    layernorm_forward(a.normed.data(), a.mean.data(), a.rstd.data(), cur.data(), lnf_w_->value.data(), lnf_b_->value.data(), N, s.C);
  else
    rmsnorm_forward(a.normed.data(), a.rstd.data(), cur.data(), lnf_w_->value.data(), N, s.C);
  const Param<T>& w = wout_ ? *wout_ : *wte_;
  a.logits.assign(std::size_t(N) * s.V, T(0));
  matmul_forward(a.logits.data(), a.normed.data(), w.value.data(), static_cast<const T*>(nullptr), N, s.C, s.V);
  *loss_sum = crossentropy_forward_backward<T>(nullptr, a.logits.data(), targets, N, s.V, 0);
  return {};
}

template <class T>
std::vector<T> StageModel<T>::backward(int mb, const T* dy, double loss_scale) {
  const Shape& s = shape_;
  auto it = in_flight_.find(mb);
  if (it == in_flight_.end()) throw std::logic_error("backward of micro-batch " + std::to_string(mb) + " without its forward");
  Acts& a = it->second;
  const int N = a.B * Tl_;
  if (a.dropped) {  // recomputation: the forward again, from the kept input
    double ignored = 0;
    std::vector<T> input = std::move(a.input);
    run_forward(a, input.data(), &ignored);
    a.dropped = false;
    activation_peak_ = std::max(activation_peak_, activation_bytes() + input.size() * sizeof(T));
  }
  std::vector<T> cur;
  if (has_head()) {
    std::vector<T> dlogits(std::size_t(N) * s.V, T(0));
    crossentropy_forward_backward(dlogits.data(), a.logits.data(), a.targets.data(), N, s.V, loss_scale);
    Param<T>& w = wout_ ? *wout_ : *wte_;
    std::vector<T> dnormed(std::size_t(N) * s.C, T(0));
    matmul_backward(dnormed.data(), w.grad.data(), static_cast<T*>(nullptr), dlogits.data(), a.normed.data(), w.value.data(),
                    N, s.C, s.V);
    cur.assign(std::size_t(N) * s.C, T(0));
    if (s.arch == Architecture::gpt)
      layernorm_backward(cur.data(), lnf_w_->grad.data(), lnf_b_->grad.data(), dnormed.data(), a.head_in.data(),
                         lnf_w_->value.data(), a.mean.data(), a.rstd.data(), N, s.C);
    else
      rmsnorm_backward(cur.data(), lnf_w_->grad.data(), dnormed.data(), a.head_in.data(), lnf_w_->value.data(), a.rstd.data(),
                       N, s.C);
  } else {
    cur.assign(dy, dy + std::int64_t(N) * s.C);
  }
  std::vector<T> prev(cur.size());
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i].backward(cur.data(), prev.data(), a.blocks[i], comm_);
    std::swap(cur, prev);
  }
  if (has_embedding()) {
    embedding_backward(wte_->grad.data(), wpe_ ? wpe_->grad.data() : static_cast<T*>(nullptr), cur.data(), a.tokens.data(),
                       N, Tl_, s.C, comm_.cp_rank * Tl_);
    cur.clear();
  }
  in_flight_.erase(it);
  return cur;
}

template <class T>
std::vector<Param<T>*> StageModel<T>::params() {
  std::vector<Param<T>*> out;
  for (auto* p : {&wte_, &wpe_}) if (*p) out.push_back(&**p);
  for (auto& b : blocks_)
    for (auto& p : b.params())
      if (!p.value.empty()) out.push_back(&p);
  for (auto* p : {&lnf_w_, &lnf_b_, &wout_}) if (*p) out.push_back(&**p);
  return out;
}

template <class T>
std::size_t StageModel<T>::activation_bytes() const {
  std::size_t n = 0;
  auto add = [&](const auto& v) { n += v.size() * sizeof(v[0]); };
  for (const auto& [mb, a] : in_flight_) {
    for (const auto* v : {&a.input, &a.embedded, &a.head_in, &a.normed, &a.mean, &a.rstd, &a.logits}) add(*v);
    add(a.tokens), add(a.targets);
    for (const auto& b : a.blocks)
      for (const auto* v : {&b.x, &b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.q, &b.k, &b.v, &b.att, &b.att_out, &b.x2, &b.ln2,
                            &b.ln2_mean, &b.ln2_rstd, &b.fc, &b.h, &b.up, &b.k_seen, &b.v_seen})
        add(*v);
  }
  return n;
}

template <class T>
void StageModel<T>::zero_grad() {
  for (auto* p : params()) std::fill(p->grad.begin(), p->grad.end(), T(0));
}

template class StageModel<float>;
template class StageModel<double>;

}  // namespace het::model
