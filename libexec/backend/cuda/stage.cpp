// The CUDA backend's Stage: the GPT and Llama blocks of model/block.cpp, the embedding and the
// head of model/stage.cpp, in bf16 on the device (cuda_backend.hpp states the contract).
// The fp32 master parameters live in a model::StageModel<float> used only as their holder, so
// names, order and initial values are those of the CPU backend by construction.
#include <cuda_runtime_api.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.hpp"
#include "model/stage.hpp"

namespace het::backend {

namespace {

using cuda::bf16;
template <class T>
using Buf = cuda::DeviceBuffer<T>;

// One parameter: the host copy (owned by the StageModel), its bf16 device copy, its fp32
// gradient and, once the step is on the device (device_optimizer), its fp32 master there.
struct DeviceParam {
  model::Param<float>* host = nullptr;
  Buf<bf16> value;
  Buf<float> own_grad;      // its gradient, unless a bucket holds it
  float* grad = nullptr;    // [size]: own_grad, or its place in a bucket's gradients
  Buf<float> own_master;    // its master on the device, unless a bucket holds it
  float* master = nullptr;  // [size]: own_master or its place in a bucket's values; null while the host holds the masters
  std::size_t size() const { return host->value.size(); }
};

// A sync bucket on the device (backend.hpp's DeviceOptimizer): its gradients and values
// [padded], and the moments of the part this rank steps [hi - lo]. `views`: every part is a
// whole parameter of weight 1, whose gradient and master live in grad and value at its offset.
struct DeviceBucket {
  BucketLayout layout;
  bool views = false;
  Buf<float> grad, value, m, v;
};

// One layer's activations of one micro-batch (as model::BlockActs, on the device).
struct LayerActs {
  Buf<bf16> x, ln1, q, k, v, att_out, x2, ln2, fc, h, up;
  Buf<bf16> k_seen, v_seen;  // cp > 1: the keys and values its queries see [B, (cp_rank+1)·Tl, KD]
  Buf<float> ln1_mean, ln1_rstd, lse, ln2_mean, ln2_rstd;  // lse: attention's [B,H,T] log-sum-exp
};

struct Acts {
  int B = 0;
  Buf<int> tokens, targets;
  std::vector<LayerActs> layers;
  Buf<bf16> head_in, normed, logits;
  Buf<float> mean, rstd;
};

class CudaStage final : public Stage, public DeviceOptimizer {
 public:
  explicit CudaStage(const StageSpec& s)
      : s_(model::Shape::of(s.model)), first_(s.first), last_(s.last), tp_rank_(s.tp_rank), tp_(s.tp), recompute_(s.recompute),
        comm_(s.comm), tp_device_(s.tp_all_reduce_device), gemm_(stream_.get()), host_(s.model, s.first, s.last, s.tp_rank, s.tp, s.seed) {
    if (s.comm.cp < 1 || s.comm.cp_rank < 0 || s.comm.cp_rank >= s.comm.cp || s_.T % s.comm.cp)
      throw std::invalid_argument("cp = " + std::to_string(s.comm.cp) + " (member " + std::to_string(s.comm.cp_rank) +
                                  ") does not divide the " + std::to_string(s_.T) + " time steps");
    Tl_ = s_.T / s.comm.cp, pos0_ = s.comm.cp_rank * Tl_;
    if (s.tp < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp || s_.H % s.tp || s_.KH % s.tp || s_.F % s.tp)
      throw std::invalid_argument("tp = " + std::to_string(s.tp) + " (shard " + std::to_string(s.tp_rank) + ") does not divide the " +
                                  std::to_string(s_.H) + " query heads, " + std::to_string(s_.KH) + " key-value heads and " +
                                  std::to_string(s_.F) + " MLP channels");
    Hs_ = s_.H / s.tp, KHs_ = s_.KH / s.tp, Fs_ = s_.F / s.tp;
    if (s_.D > 256) throw std::invalid_argument("the CUDA attention kernel takes head dimensions up to 256, got " + std::to_string(s_.D));
    for (auto* p : host_.params()) {
      index_[p->name] = params_.size();
      DeviceParam& q = params_.emplace_back();
      q.host = p, q.value = Buf<bf16>(ledger_, stream(), p->value.size()), q.own_grad = Buf<float>(ledger_, stream(), p->value.size());
      q.grad = q.own_grad.get();
    }
    zero_grad();
  }

  // With context parallelism x, the tokens and the targets hold this member's Tl time steps of
  // each sequence, from pos0 (model/stage.hpp). Host tensors (tools, tests): through the device
  // ones below, done when they return.
  std::vector<float> forward(int mb, int B, const int* tokens, const float* x, const int* targets, double* loss_sum) override {
    DeviceTensor in = first_ == 0 ? DeviceTensor{} : upload(x, std::size_t(B) * Tl_ * s_.C);
    const DeviceTensor out = forward_device(mb, B, tokens, std::move(in), targets, loss_sum);
    return out.empty() ? std::vector<float>{} : download(out);
  }
  std::vector<float> backward(int mb, const float* dy, double loss_scale) override {
    const auto it = in_flight_.find(mb);
    DeviceTensor in = last_ == s_.L + 1 || it == in_flight_.end() ? DeviceTensor{} : upload(dy, std::size_t(it->second.B) * Tl_ * s_.C);
    const DeviceTensor out = backward_device(mb, std::move(in), loss_scale);
    return out.empty() ? std::vector<float>{} : download(out);
  }

  // ---- Activations on the device (backend.hpp) ----
  bool device_activations() const override { return true; }

  DeviceTensor forward_device(int mb, int B, const int* tokens, DeviceTensor x, const int* targets, double* loss_sum) override {
    const Computing computing(*this);
    const int N = B * Tl_, C = s_.C;
    Acts& a = in_flight_[mb];
    a = Acts{};
    a.B = B;
    Buf<bf16> cur;
    if (first_ == 0) {
      cur = Buf<bf16>(ledger_, stream(), std::size_t(N) * C);
      a.tokens = upload_ints(tokens, std::size_t(N));
      const DeviceParam* wpe = find("wpe");
      cuda::embedding_forward(cur.get(), a.tokens.get(), p("wte"), wpe ? wpe->value.get() : nullptr, N, Tl_, C, pos0_, stream());
    } else {
      cur = take(std::move(x), std::size_t(N) * C, "the forward's input");
    }
    for (int u = std::max(first_, 1); u <= std::min(last_, s_.L); ++u) {
      a.layers.emplace_back();
      cur = layer_forward(u - 1, std::move(cur), B, a.layers.back());
      forget(a.layers.back());
    }
    if (last_ != s_.L + 1) {
      cuda::check_launch("the forward of a stage");
      sync("the forward of a stage", true);  // its output, read by another stream or the host
      return wrap(std::move(cur));
    }
    // Head: final norm, logits against wte (tied, gpt) or wout, cross-entropy.
    a.targets = upload_ints(targets, std::size_t(N));
    a.head_in = std::move(cur);
    a.normed = Buf<bf16>(ledger_, stream(), std::size_t(N) * C), a.mean = Buf<float>(ledger_, stream(), N), a.rstd = Buf<float>(ledger_, stream(), N);
    norm_forward(a.normed.get(), a.mean.get(), a.rstd.get(), a.head_in.get(), "lnf_w", "lnf_b", N);
    a.logits = Buf<bf16>(ledger_, stream(), std::size_t(N) * s_.V);
    gemm_.forward(a.logits.get(), a.normed.get(), p(head_weight()), nullptr, nullptr, N, C, s_.V);
    Buf<float> losses(ledger_, stream(), N);
    cuda::crossentropy_forward_backward(nullptr, losses.get(), a.logits.get(), a.targets.get(), N, s_.V, 0.f, stream());
    cuda::check_launch("the forward of the head");  // a failed launch leaves no error for the synchronisation to report
    std::vector<float> host(losses.size());
    d2h(host.data(), losses.get(), losses.bytes(), "copying losses");
    sync("the forward of the last stage", true);  // the losses
    double sum = 0;
    for (float l : host) sum += l;
    *loss_sum = sum;
    return {};
  }

  DeviceTensor backward_device(int mb, DeviceTensor dy, double loss_scale) override {
    DeviceTensor dx = launch_backward(mb, std::move(dy), loss_scale);
    // The first stage's backward gives nothing to wait for, yet it too returns when the device has
    // done it: the runtime's trace times the device's work, not its launches (on an H200 the
    // launches of gpt-medium's backward took 3.3 ms of its 279 ms, and the optimizer's wait the
    // rest). After the work is launched, so not counted as a synchronisation inside a backward.
    if (dx.empty()) sync("the backward of the first stage", false);
    return dx;
  }

  DeviceTensor device_tensor(std::size_t n) override {
    DeviceTensor t = wrap(Buf<bf16>(ledger_, stream(), n));
    sync("a receive's buffer", true);  // stream-ordered memory: usable by another stream once its allocation ran
    return t;
  }
  void copy_device(const DeviceTensor& src, const program::Block& from, DeviceTensor& dst, const program::Block& to,
                   const program::Block& region) override {
    const std::size_t e = sizeof(bf16), width = std::size_t(region.c1 - region.c0) * e;
    const std::size_t spitch = std::size_t(from.c1 - from.c0) * e, dpitch = std::size_t(to.c1 - to.c0) * e;
    for (int r = region.r0; r < region.r1; ++r) {  // one row: (time steps) x (channels) with the two blocks' pitches
      const std::size_t s = (std::size_t(r - from.r0) * std::size_t(from.t1 - from.t0) + std::size_t(region.t0 - from.t0)) * spitch +
                            std::size_t(region.c0 - from.c0) * e;
      const std::size_t d = (std::size_t(r - to.r0) * std::size_t(to.t1 - to.t0) + std::size_t(region.t0 - to.t0)) * dpitch +
                            std::size_t(region.c0 - to.c0) * e;
      cuda::check(cudaMemcpy2DAsync(static_cast<char*>(dst.data) + d, dpitch, static_cast<const char*>(src.data) + s, spitch, width,
                                    std::size_t(region.t1 - region.t0), cudaMemcpyDeviceToDevice, stream()),
                  "copying a block of activations");
    }
    sync("copying a block of activations", true);  // read by another stream next
  }
  DeviceTensor upload(const float* host, std::size_t n) override {
    Buf<bf16> d(ledger_, stream(), n);
    upload_bf16(d.get(), host, n);
    return wrap(std::move(d));
  }
  std::vector<float> download(const DeviceTensor& t) override { return download(static_cast<const bf16*>(t.data), t.elements); }

  std::optional<DeviceCounters> device_counters() const override { return counters_; }

  // The host gradients made whole (backend.hpp): the fp32 device gradients, the sum over the
  // step's micro-batches, copied into params()' grad vectors through the pinned buffer.
  void finish_backward() override {
    if (resident()) return;  // the gradients stay on the device
    through_pinned([](const DeviceParam& q) { return q.host->grad.data(); },
                   [&](const Piece& pc) {
                     d2h(pinned_.get() + pc.at, pc.q->grad + pc.offset, pc.n * sizeof(float), "copying the gradient of " + pc.q->host->name);
                   },
                   false);
  }

  std::vector<model::Param<float>*> params() override { return host_.params(); }

  // Zeroes the device gradients and brings the host's master values to the device (through the
  // pinned buffer, then to bf16 from the fp32 staging buffer). The host gradients are left as
  // they are: finish_backward() overwrites every one of them.
  void zero_grad() override {
    for (auto& q : params_)
      cuda::check(cudaMemsetAsync(q.grad, 0, q.size() * sizeof(float), stream()), "clearing the gradient of " + q.host->name);
    if (resident()) return;  // the masters are on the device, the bf16 copies made from them by the step
    const std::size_t want = std::min(total_parameters(), kPinnedFloats);
    if (staging_.size() < want) {
      staging_ = Buf<float>(ledger_, stream(), want);
    }
    through_pinned([](const DeviceParam& q) { return q.host->value.data(); },
                   [&](const Piece& pc) {
                     h2d(staging_.get() + pc.at, pinned_.get() + pc.at, pc.n * sizeof(float), "copying the values of " + pc.q->host->name);
                     cuda::to_bf16(pc.q->value.get() + pc.offset, staging_.get() + pc.at, std::int64_t(pc.n), stream());
                     cuda::check_launch("to_bf16");
                   },
                   true);
  }

  std::optional<DeviceMemory> device_memory() const override { return DeviceMemory{ledger_.in_use, ledger_.peak}; }

  // ---- The step on the device (backend.hpp's DeviceOptimizer) ----
  // Before the first step (gradients zero): the host-mode staging and the gradients that move
  // into buckets are freed first, so the device never holds both.
  DeviceOptimizer* device_optimizer(std::vector<BucketLayout> layouts) override {
    if (resident()) throw std::logic_error("the CUDA stage's device optimizer was asked for twice");
    staging_ = Buf<float>(), pinned_ = cuda::PinnedBuffer<float>();
    std::vector<bool> placed(params_.size(), false);
    std::vector<DeviceBucket> buckets;  // the stage's once all are made; a failure midway (out of memory) leaves it unusable
    for (auto& l : layouts) {
      DeviceBucket& b = buckets.emplace_back();
      // A bucket of whole parameters is their gradients and masters (nothing packed); a weight
      // (1/tp on a parameter every TP shard holds whole) scales its gradient in place.
      b.views = std::all_of(l.parts.begin(), l.parts.end(), [&](const BucketLayout::Part& pt) {
        const bool contiguous = pt.count == 1 || pt.run == pt.stride;
        return pt.start == 0 && contiguous && pt.run * pt.count == params_.at(pt.param).size() && !placed[pt.param];
      });
      if (b.views)
        for (const auto& pt : l.parts) placed[pt.param] = true, params_[pt.param].own_grad = Buf<float>(), params_[pt.param].grad = nullptr;
      b.layout = std::move(l);
    }
    for (DeviceBucket& b : buckets) {
      const BucketLayout& l = b.layout;
      for (auto* buf : {&b.grad, &b.value}) *buf = Buf<float>(ledger_, stream(), l.padded), zero(*buf);
      for (auto* buf : {&b.m, &b.v}) *buf = Buf<float>(ledger_, stream(), l.hi - l.lo), zero(*buf);
      if (b.views)
        for (const auto& pt : l.parts) params_[pt.param].grad = b.grad.get() + pt.at, params_[pt.param].master = b.value.get() + pt.at;
    }
    for (auto& q : params_)
      if (!q.master) q.own_master = Buf<float>(ledger_, stream(), q.size()), q.master = q.own_master.get();
    buckets_ = std::move(buckets);
    push_values();
    return this;
  }
  float* gradients(std::size_t i) override { return buckets_.at(i).grad.get(); }
  float* values(std::size_t i) override { return buckets_.at(i).value.get(); }
  std::pair<float*, float*> moments(std::size_t i) override { return {buckets_.at(i).m.get(), buckets_.at(i).v.get()}; }

  void pack_gradients(std::size_t i) override {
    DeviceBucket& b = buckets_.at(i);
    for (const auto& pt : b.layout.parts)
      if (!b.views || pt.weight != 1.f)  // a view's part: in place (params_[pt.param].grad is b.grad + pt.at)
        cuda::pack_elements(b.grad.get() + pt.at, params_[pt.param].grad, runs(pt), pt.weight, stream());
    cuda::check_launch("packing the gradients");
    sync("packing the gradients", true);  // the collective runs on its own stream
  }

  void update(std::size_t i, const model::AdamW& o, int step, bool unpack) override {
    DeviceBucket& b = buckets_.at(i);
    const BucketLayout& l = b.layout;
    if (!b.views)
      for (const auto& pt : l.parts) cuda::pack_elements(b.value.get() + pt.at, params_[pt.param].master, runs(pt), 1.f, stream());
    for (const auto& pt : l.parts) {  // the owned part of each part, with its parameter's decay (as runtime::update)
      const std::size_t lo = std::max(l.lo, pt.at), hi = std::min(l.hi, pt.at + pt.run * pt.count);
      if (lo >= hi) continue;
      const cuda::AdamWArgs args{float(o.lr), float(o.beta1), float(o.beta2), float(o.eps), float(o.weight_decay), step,
                                 model::decays(params_[pt.param].host->name)};
      cuda::adamw_update(b.value.get() + lo, b.grad.get() + lo, b.m.get() + (lo - l.lo), b.v.get() + (lo - l.lo), std::int64_t(hi - lo),
                         args, stream());
    }
    if (unpack) return unpack_values(i);
    cuda::check_launch("AdamW");
    sync("AdamW", true);  // the all-gather runs on its own stream
  }

  void unpack_values(std::size_t i) override {
    DeviceBucket& b = buckets_.at(i);
    for (const auto& pt : b.layout.parts) {
      DeviceParam& q = params_[pt.param];
      if (!b.views) cuda::unpack_elements(q.master, b.value.get() + pt.at, runs(pt), stream());
      cuda::to_bf16(q.value.get(), q.master, std::int64_t(q.size()), stream());
    }
    cuda::check_launch("the new values");
    sync("the new values", true);
  }

  void to_host(float* host, const float* device, std::size_t n) override {
    d2h(host, device, n * sizeof(float), "copying to the host");
    sync("copying to the host", true);
  }
  void to_device(float* device, const float* host, std::size_t n) override {
    h2d(device, host, n * sizeof(float), "copying to the device");
    sync("copying to the device", true);
  }
  void pull_values() override {
    for (auto& q : params_)
      d2h(q.host->value.data(), q.master, q.size() * sizeof(float), "copying the master of " + q.host->name + " to the host");
    sync("copying the masters to the host", true);
  }
  void push_values() override {
    for (auto& q : params_) {
      h2d(q.master, q.host->value.data(), q.size() * sizeof(float), "copying the master of " + q.host->name + " to the device");
      cuda::to_bf16(q.value.get(), q.master, std::int64_t(q.size()), stream());
    }
    cuda::check_launch("to_bf16");
    sync("copying the masters to the device", true);
  }

  std::size_t activation_bytes() const override {
    std::size_t n = 0;
    for (const auto& [mb, a] : in_flight_) {
      n += a.tokens.bytes() + a.targets.bytes() + a.head_in.bytes() + a.normed.bytes() + a.logits.bytes() + a.mean.bytes() + a.rstd.bytes();
      for (const auto& l : a.layers) {
        for (const auto* b : {&l.x, &l.ln1, &l.q, &l.k, &l.v, &l.att_out, &l.x2, &l.ln2, &l.fc, &l.h, &l.up, &l.k_seen, &l.v_seen})
          n += b->bytes();
        for (const auto* b : {&l.ln1_mean, &l.ln1_rstd, &l.lse, &l.ln2_mean, &l.ln2_rstd}) n += b->bytes();
      }
    }
    return n;
  }

 private:
  cudaStream_t stream() const { return stream_.get(); }
  bool gpt() const { return s_.arch == Architecture::gpt; }
  const char* head_weight() const { return gpt() ? "wte" : "wout"; }

  const DeviceParam* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &params_[it->second];
  }
  const DeviceParam& param(const std::string& name) const {
    const DeviceParam* q = find(name);
    if (!q) throw std::logic_error("the CUDA stage holds no parameter " + name);
    return *q;
  }
  const bf16* p(const std::string& name) const { return param(name).value.get(); }
  float* g(const std::string& name) const { return param(name).grad; }
  bool resident() const { return !buckets_.empty(); }
  // backward_device's work, launched; the first stage's may still run on return.
  DeviceTensor launch_backward(int mb, DeviceTensor dy, double loss_scale) {
    const Computing computing(*this);
    auto it = in_flight_.find(mb);
    if (it == in_flight_.end()) throw std::logic_error("backward of micro-batch " + std::to_string(mb) + " without its forward");
    Acts& a = it->second;
    const int N = a.B * Tl_, C = s_.C;
    Buf<bf16> cur;
    if (last_ == s_.L + 1) {
      cur = Buf<bf16>(ledger_, stream(), std::size_t(N) * C);
      Buf<bf16> dlogits(ledger_, stream(), std::size_t(N) * s_.V);
      Buf<float> losses(ledger_, stream(), N);
      cuda::crossentropy_forward_backward(dlogits.get(), losses.get(), a.logits.get(), a.targets.get(), N, s_.V, float(loss_scale),
                                          stream());
      const char* w = head_weight();
      Buf<bf16> dnormed(ledger_, stream(), std::size_t(N) * C);
      gemm_.backward_input(dnormed.get(), dlogits.get(), p(w), N, C, s_.V, false);
      gemm_.backward_weight(g(w), dlogits.get(), a.normed.get(), N, C, s_.V);
      zero(cur);
      norm_backward(cur.get(), dnormed.get(), a.head_in.get(), a.mean.get(), a.rstd.get(), "lnf_w", "lnf_b", N);
      cuda::check_launch("the backward of the head");
    } else {
      cur = take(std::move(dy), std::size_t(N) * C, "the backward's input");
    }
    for (int u = std::min(last_, s_.L); u >= std::max(first_, 1); --u) {
      LayerActs& kept = a.layers[std::size_t(u - std::max(first_, 1))];
      cur = layer_backward(u - 1, cur.get(), recall(u - 1, kept, a.B));
      kept = LayerActs{};  // this layer's activations go back to the pool now
    }
    DeviceTensor dx;
    if (first_ == 0) {  // nothing leaves the stage: backward_device waits for it
      const DeviceParam* wpe = find("wpe");
      cuda::embedding_backward(g("wte"), wpe ? wpe->grad : nullptr, cur.get(), a.tokens.get(), N, Tl_, C, pos0_, stream());
      cuda::check_launch("the backward of the embedding");
    } else {
      cuda::check_launch("the backward of a stage");
      sync("the backward of a stage", true);  // its output, read by another stream or the host
      dx = wrap(std::move(cur));
    }
    in_flight_.erase(it);  // its buffers return to the pool in stream order
    return dx;
  }

  static cuda::ElementRuns runs(const BucketLayout::Part& pt) {
    return {std::int64_t(pt.start), std::int64_t(pt.run), std::int64_t(pt.stride), std::int64_t(pt.run * pt.count)};
  }
  // A bias when the architecture has one (gpt), else null.
  const bf16* bias(const std::string& name) const { return gpt() ? p(name) : nullptr; }

  std::size_t total_parameters() const {
    std::size_t n = 0;
    for (const auto& q : params_) n += q.size();
    return n;
  }
  // Elements [offset, offset + n) of parameter q, at pinned_[at].
  struct Piece {
    const DeviceParam* q;
    std::size_t offset, at, n;
  };
  // Moves every parameter's host vector host_of(q) [q's size] through the pinned buffer, as many
  // pieces at a time as it holds (all, or kPinnedFloats): to the device (to_device: the host
  // copies into pinned_ on every core, then copy(piece) for each piece; the buffer is reused
  // only after the stream drained), or from it (copy(piece) for each piece, one
  // synchronisation, then the host copies out on every core).
  template <class HostOf, class Copy>
  void through_pinned(HostOf&& host_of, Copy&& copy, bool to_device) {
    const std::size_t want = std::min(total_parameters(), kPinnedFloats);
    if (pinned_.size() < want) pinned_ = cuda::PinnedBuffer<float>(want);
    std::vector<Piece> pieces;
    std::size_t used = 0;
    auto host_copies = [&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, used, std::size_t(1) << 18), [&](const tbb::blocked_range<std::size_t>& r) {
        for (const Piece& pc : pieces) {  // the pieces' parts in [r.begin(), r.end()) of the pinned buffer
          const std::size_t lo = std::max(r.begin(), pc.at), hi = std::min(r.end(), pc.at + pc.n);
          if (lo >= hi) continue;
          float* host = host_of(*pc.q) + pc.offset + (lo - pc.at);
          if (to_device) std::copy_n(host, hi - lo, pinned_.get() + lo);
          else std::copy_n(pinned_.get() + lo, hi - lo, host);
        }
      });
    };
    auto flush = [&] {
      if (to_device) host_copies();
      for (const Piece& pc : pieces) copy(pc);
      sync(to_device ? "copying the parameters to the device" : "copying the gradients to the host", true);
      if (!to_device) host_copies();
      pieces.clear(), used = 0;
    };
    for (const auto& q : params_)
      for (std::size_t offset = 0; offset < q.size();) {
        if (used == pinned_.size()) flush();
        const std::size_t n = std::min(q.size() - offset, pinned_.size() - used);
        pieces.push_back({&q, offset, used, n});
        used += n, offset += n;
      }
    flush();
  }

  // ---- Every copy between host and device and every synchronisation, counted (DeviceCounters) ----
  void h2d(void* device, const void* host, std::size_t bytes, const std::string& what) {
    cuda::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream()), what);
    counters_.to_device_bytes += bytes;
  }
  void d2h(void* host, const void* device, std::size_t bytes, const std::string& what) {
    cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()), what);
    counters_.to_host_bytes += bytes;
  }
  // Waits for the stream; `transfer`: for data another stream or the host reads next.
  void sync(const std::string& what, bool transfer) {
    cuda::check(cudaStreamSynchronize(stream()), what);
    ++counters_.syncs;
    if (computing_) ++counters_.compute_syncs, counters_.compute_syncs_other += transfer ? 0 : 1;
  }
  // Marks the stage inside a forward or backward for the counters.
  struct Computing {
    CudaStage& stage;
    explicit Computing(CudaStage& s) : stage(s) { stage.computing_ = true; }
    ~Computing() { stage.computing_ = false; }
  };

  // A tensor of this stage's (backend.hpp): the buffer in shared ownership.
  static DeviceTensor wrap(Buf<bf16> b) {
    auto owner = std::make_shared<Buf<bf16>>(std::move(b));
    bf16* data = owner->get();
    const std::size_t n = owner->size();
    return {std::move(owner), data, n};
  }
  // Its buffer, taken over where `t` is its only holder, else copied.
  Buf<bf16> take(DeviceTensor t, std::size_t n, const char* what) {
    if (t.elements != n)
      throw std::logic_error(std::string(what) + " holds " + std::to_string(t.elements) + " elements, not " + std::to_string(n));
    auto buf = std::static_pointer_cast<Buf<bf16>>(std::move(t.owner));
    if (buf.use_count() == 1) return std::move(*buf);
    Buf<bf16> copy(ledger_, stream(), n);
    cuda::check(cudaMemcpyAsync(copy.get(), buf->get(), buf->bytes(), cudaMemcpyDeviceToDevice, stream()), what);
    return copy;
  }

  template <class T>
  Buf<T> upload_ints(const T* host, std::size_t n) {
    Buf<T> d(ledger_, stream(), n);
    h2d(d.get(), host, d.bytes(), "copying to the device");
    return d;
  }
  // out[n] (bf16, device) from host fp32, through the staging buffer.
  void upload_bf16(bf16* out, const float* host, std::size_t n) {
    if (staging_.size() < n) {
      staging_ = Buf<float>(ledger_, stream(), n);
    }
    h2d(staging_.get(), host, n * sizeof(float), "copying to the device");
    cuda::to_bf16(out, staging_.get(), std::int64_t(n), stream());
    cuda::check_launch("to_bf16");
  }
  std::vector<float> download(const bf16* d, std::size_t n) {
    if (staging_.size() < n) {
      staging_ = Buf<float>(ledger_, stream(), n);
    }
    cuda::to_float(staging_.get(), d, std::int64_t(n), stream());
    cuda::check_launch("copying to the host");  // this or an earlier launch of the stage
    std::vector<float> host(n);
    d2h(host.data(), staging_.get(), n * sizeof(float), "copying to the host");
    sync("copying to the host", true);
    return host;
  }
  template <class T>
  void zero(Buf<T>& b) {
    cuda::check(cudaMemsetAsync(b.get(), 0, b.bytes(), stream()), "clearing a buffer");
  }

  // LayerNorm (gpt) or RMSNorm (llama) of x[N,C]; mean is unused for RMSNorm.
  void norm_forward(bf16* out, float* mean, float* rstd, const bf16* x, const std::string& w, const std::string& b, int N) {
    if (gpt()) cuda::layernorm_forward(out, mean, rstd, x, p(w), p(b), N, s_.C, stream());
    else cuda::rmsnorm_forward(out, rstd, x, p(w), N, s_.C, stream());
  }
  void norm_backward(bf16* dx, const bf16* dout, const bf16* x, const float* mean, const float* rstd, const std::string& w,
                     const std::string& b, int N) {
    if (gpt()) cuda::layernorm_backward(dx, g(w), g(b), dout, x, p(w), mean, rstd, N, s_.C, stream());
    else cuda::rmsnorm_backward(dx, g(w), dout, x, p(w), rstd, N, s_.C, stream());
  }

  // Context parallelism's exchanges (model::gather_seen, scatter_seen) through host memory: the
  // runtime's CP collectives are TCP rings on host buffers.
  const bf16* keys(const LayerActs& a) const { return comm_.cp > 1 ? a.k_seen.get() : a.k.get(); }
  const bf16* values(const LayerActs& a) const { return comm_.cp > 1 ? a.v_seen.get() : a.v.get(); }
  void gather_seen(LayerActs& a, int B, int KD) {
    const std::size_t n = std::size_t(B) * Tl_ * KD;
    const std::vector<float> k = download(a.k.get(), n), v = download(a.v.get(), n);
    std::vector<float> k_seen, v_seen;
    model::gather_seen(k.data(), v.data(), B, Tl_, KD, comm_, k_seen, v_seen);
    a.k_seen = Buf<bf16>(ledger_, stream(), k_seen.size()), a.v_seen = Buf<bf16>(ledger_, stream(), v_seen.size());
    upload_bf16(a.k_seen.get(), k_seen.data(), k_seen.size());
    upload_bf16(a.v_seen.get(), v_seen.data(), v_seen.size());
    sync("the keys and values seen", true);  // k_seen, v_seen (host) go out of scope
  }
  // dk, dv [B,Tl,KD] (device fp32, zero) = the members' gradients of this member's keys and values.
  void scatter_seen(const float* dk_seen, const float* dv_seen, float* dk, float* dv, int B, int KD) {
    const std::size_t n = std::size_t(B) * Tl_ * KD, seen = std::size_t(B) * (pos0_ + Tl_) * KD;
    std::vector<float> dks(seen), dvs(seen), mine_k(n, 0.f), mine_v(n, 0.f);
    d2h(dks.data(), dk_seen, seen * sizeof(float), "copying to the host");
    d2h(dvs.data(), dv_seen, seen * sizeof(float), "copying to the host");
    sync("copying to the host", true);
    model::scatter_seen(dks.data(), dvs.data(), mine_k.data(), mine_v.data(), B, Tl_, KD, comm_);
    h2d(dk, mine_k.data(), n * sizeof(float), "copying to the device");
    h2d(dv, mine_v.data(), n * sizeof(float), "copying to the device");
    sync("copying to the device", true);
  }

  // Sums x[n] over the stage's TP group in place, in fp32 as the CPU backend sums: on the device
  // where the group can (NCCL, on its own stream: this stream drained first), else through host
  // memory (a TCP group). A no-op at tp = 1.
  void tp_sum(bf16* x, std::size_t n) {
    if (tp_ == 1) return;
    Buf<float> sum(ledger_, stream(), n);
    cuda::to_float(sum.get(), x, std::int64_t(n), stream());
    cuda::check_launch("the TP all-reduce's input");
    if (tp_device_) {
      sync("the TP all-reduce's input", true);
      tp_device_(sum.get(), n);
    } else {
      std::vector<float> host(n);
      d2h(host.data(), sum.get(), n * sizeof(float), "copying to the host");
      sync("copying to the host", true);
      comm_.tp_all_reduce(host.data(), n);
      h2d(sum.get(), host.data(), n * sizeof(float), "copying to the device");
      sync("copying to the device", true);  // `host` goes out of scope
    }
    cuda::to_bf16(x, sum.get(), std::int64_t(n), stream());
    cuda::check_launch("the TP all-reduce's output");
  }

  // model::Block::forward on the device: y[B,T,C] from x (kept in acts.x).
  // With tensor parallelism (Megatron, as model/block.hpp) the shard's H = H/tp query heads,
  // KH/tp key-value heads and F/tp MLP channels; the row-parallel products (wo, w2) are partial
  // sums, summed over the TP group (tp_sum), shard 0's with the bias and the residual added.
  Buf<bf16> layer_forward(int layer, Buf<bf16> x, int B, LayerActs& a) {
    const std::string l = "layer" + std::to_string(layer) + ".";
    const int T = Tl_, N = B * T, C = s_.C, D = s_.D, H = Hs_, KH = KHs_, F = Fs_, QD = H * D, KD = KH * D;
    const bool first = tp_rank_ == 0;  // the shard that adds the biases and residuals of row-parallel products
    const std::size_t n = std::size_t(N);
    a.x = std::move(x);
    a.ln1 = Buf<bf16>(ledger_, stream(), n * C), a.ln1_mean = Buf<float>(ledger_, stream(), n), a.ln1_rstd = Buf<float>(ledger_, stream(), n);
    norm_forward(a.ln1.get(), a.ln1_mean.get(), a.ln1_rstd.get(), a.x.get(), l + "ln1_w", l + "ln1_b", N);
    a.q = Buf<bf16>(ledger_, stream(), n * QD), a.k = Buf<bf16>(ledger_, stream(), n * KD), a.v = Buf<bf16>(ledger_, stream(), n * KD);
    gemm_.forward(a.q.get(), a.ln1.get(), p(l + "wq"), bias(l + "bq"), nullptr, N, C, QD);
    gemm_.forward(a.k.get(), a.ln1.get(), p(l + "wk"), bias(l + "bk"), nullptr, N, C, KD);
    gemm_.forward(a.v.get(), a.ln1.get(), p(l + "wv"), bias(l + "bv"), nullptr, N, C, KD);
    if (!gpt()) {
      cuda::rope_forward(a.q.get(), B, T, H, D, pos0_, stream());
      cuda::rope_forward(a.k.get(), B, T, KH, D, pos0_, stream());
    }
    if (comm_.cp > 1) gather_seen(a, B, KD);
    a.lse = Buf<float>(ledger_, stream(), std::size_t(B) * H * T), a.att_out = Buf<bf16>(ledger_, stream(), n * QD);
    cuda::attention_forward(a.att_out.get(), a.lse.get(), a.q.get(), keys(a), values(a), B, T, pos0_ + T, pos0_, H, KH, D, stream());
    a.x2 = Buf<bf16>(ledger_, stream(), n * C);  // x2 = x + att_out · wo^T (+ bo)
    gemm_.forward(a.x2.get(), a.att_out.get(), p(l + "wo"), first ? bias(l + "bo") : nullptr, first ? a.x.get() : nullptr, N, QD, C);
    tp_sum(a.x2.get(), n * C);
    a.ln2 = Buf<bf16>(ledger_, stream(), n * C), a.ln2_mean = Buf<float>(ledger_, stream(), n), a.ln2_rstd = Buf<float>(ledger_, stream(), n);
    norm_forward(a.ln2.get(), a.ln2_mean.get(), a.ln2_rstd.get(), a.x2.get(), l + "ln2_w", l + "ln2_b", N);
    a.fc = Buf<bf16>(ledger_, stream(), n * F), a.h = Buf<bf16>(ledger_, stream(), n * F);
    gemm_.forward(a.fc.get(), a.ln2.get(), p(l + (gpt() ? "wfc" : "wgate")), bias(l + "bfc"), nullptr, N, C, F);
    if (gpt()) {
      cuda::gelu_forward(a.h.get(), a.fc.get(), std::int64_t(n) * F, stream());
    } else {
      a.up = Buf<bf16>(ledger_, stream(), n * F);
      gemm_.forward(a.up.get(), a.ln2.get(), p(l + "wup"), nullptr, nullptr, N, C, F);
      cuda::swiglu_forward(a.h.get(), a.fc.get(), a.up.get(), std::int64_t(n) * F, stream());
    }
    Buf<bf16> y(ledger_, stream(), n * C);  // y = x2 + h · w2^T (+ b2)
    gemm_.forward(y.get(), a.h.get(), p(l + (gpt() ? "wproj" : "wdown")), first ? bias(l + "bproj") : nullptr,
                  first ? a.x2.get() : nullptr, N, F, C);
    tp_sum(y.get(), n * C);
    cuda::check_launch("the forward of layer " + std::to_string(layer));
    return y;
  }

  // Recomputation (the plan's stages[].recompute; memory.hpp's bf16 layout): after a layer's
  // forward, `full` keeps only its input x, `selective` all but attention's log-sum-exp.
  void forget(LayerActs& a) const {
    if (recompute_ == Recompute::full) {
      LayerActs input;
      input.x = std::move(a.x);
      a = std::move(input);
    } else if (recompute_ == Recompute::selective) {
      a.lse = Buf<float>();
    }
  }
  // What a layer's backward needs, from what forget() kept: the layer's forward again from its
  // input (full: one layer's activations at a time), or the attention forward again for its
  // log-sum-exp (selective; its output, the same bits as the kept one, is dropped). The kernels
  // are deterministic, so the gradients are those of a run that keeps everything.
  LayerActs& recall(int layer, LayerActs& kept, int B) {
    if (recompute_ == Recompute::full) {
      LayerActs again;
      layer_forward(layer, std::move(kept.x), B, again);  // its output y is not needed
      kept = std::move(again);
    } else if (recompute_ == Recompute::selective) {
      const int T = Tl_, H = Hs_, D = s_.D;
      kept.lse = Buf<float>(ledger_, stream(), std::size_t(B) * H * T);
      Buf<bf16> out(ledger_, stream(), kept.att_out.size());
      cuda::attention_forward(out.get(), kept.lse.get(), kept.q.get(), keys(kept), values(kept), B, T, pos0_ + T, pos0_, H, KHs_, D,
                              stream());
      cuda::check_launch("the attention of layer " + std::to_string(layer) + " again");
    }
    return kept;
  }

  // model::Block::backward on the device: dx[B,T,C] from dy; accumulates the parameter gradients.
  Buf<bf16> layer_backward(int layer, const bf16* dy, const LayerActs& a) {
    const std::string l = "layer" + std::to_string(layer) + ".";
    const int B = int(a.x.size() / std::size_t(Tl_) / std::size_t(s_.C));
    const int T = Tl_, N = B * T, C = s_.C, D = s_.D, H = Hs_, KH = KHs_, F = Fs_, QD = H * D, KD = KH * D;
    const std::size_t n = std::size_t(N);
    const std::string w1 = l + (gpt() ? "wfc" : "wgate"), w2 = l + (gpt() ? "wproj" : "wdown");
    // MLP: y = x2 + w2 · h (+ b2); dx2 starts as the residual's share, dy.
    Buf<bf16> dx2(ledger_, stream(), n * C);
    cuda::check(cudaMemcpyAsync(dx2.get(), dy, dx2.bytes(), cudaMemcpyDeviceToDevice, stream()), "copying a gradient");
    if (gpt()) cuda::bias_backward(g(l + "bproj"), dy, N, C, stream());
    Buf<bf16> dh(ledger_, stream(), n * F), dfc(ledger_, stream(), n * F), dln2(ledger_, stream(), n * C);
    gemm_.backward_input(dh.get(), dy, p(w2), N, F, C, false);
    gemm_.backward_weight(g(w2), dy, a.h.get(), N, F, C);
    if (gpt()) {
      cuda::gelu_backward(dfc.get(), a.fc.get(), dh.get(), std::int64_t(n) * F, stream());
    } else {
      Buf<bf16> dup(ledger_, stream(), n * F);
      cuda::swiglu_backward(dfc.get(), dup.get(), dh.get(), a.fc.get(), a.up.get(), std::int64_t(n) * F, stream());
      gemm_.backward_input(dln2.get(), dup.get(), p(l + "wup"), N, C, F, false);
      gemm_.backward_weight(g(l + "wup"), dup.get(), a.ln2.get(), N, C, F);
    }
    gemm_.backward_input(dln2.get(), dfc.get(), p(w1), N, C, F, !gpt());
    gemm_.backward_weight(g(w1), dfc.get(), a.ln2.get(), N, C, F);
    if (gpt()) cuda::bias_backward(g(l + "bfc"), dfc.get(), N, F, stream());
    tp_sum(dln2.get(), n * C);  // the column-parallel input gradient
    norm_backward(dx2.get(), dln2.get(), a.x2.get(), a.ln2_mean.get(), a.ln2_rstd.get(), l + "ln2_w", l + "ln2_b", N);
    // Attention: x2 = x + wo · att_out (+ bo)
    if (gpt()) cuda::bias_backward(g(l + "bo"), dx2.get(), N, C, stream());
    Buf<bf16> datt_out(ledger_, stream(), n * QD);
    gemm_.backward_input(datt_out.get(), dx2.get(), p(l + "wo"), N, QD, C, false);
    gemm_.backward_weight(g(l + "wo"), dx2.get(), a.att_out.get(), N, QD, C);
    Buf<float> dqf(ledger_, stream(), n * QD), dkf(ledger_, stream(), n * KD), dvf(ledger_, stream(), n * KD);
    zero(dqf), zero(dkf), zero(dvf);
    // With cp > 1 the gradients of the keys and values seen, then each member's own summed.
    Buf<float> dk_seen, dv_seen;
    if (comm_.cp > 1) {
      dk_seen = Buf<float>(ledger_, stream(), a.k_seen.size()), dv_seen = Buf<float>(ledger_, stream(), a.v_seen.size());
      zero(dk_seen), zero(dv_seen);
    }
    cuda::attention_backward(dqf.get(), comm_.cp > 1 ? dk_seen.get() : dkf.get(), comm_.cp > 1 ? dv_seen.get() : dvf.get(),
                             datt_out.get(), a.att_out.get(), a.lse.get(), a.q.get(), keys(a), values(a), B, T, pos0_ + T, pos0_, H,
                             KH, D, stream());
    if (comm_.cp > 1) scatter_seen(dk_seen.get(), dv_seen.get(), dkf.get(), dvf.get(), B, KD);
    if (!gpt()) {
      cuda::rope_backward(dqf.get(), B, T, H, D, pos0_, stream());
      cuda::rope_backward(dkf.get(), B, T, KH, D, pos0_, stream());
    }
    Buf<bf16> dq(ledger_, stream(), n * QD), dk(ledger_, stream(), n * KD), dv(ledger_, stream(), n * KD), dln1(ledger_, stream(), n * C);
    cuda::to_bf16(dq.get(), dqf.get(), std::int64_t(n) * QD, stream());
    cuda::to_bf16(dk.get(), dkf.get(), std::int64_t(n) * KD, stream());
    cuda::to_bf16(dv.get(), dvf.get(), std::int64_t(n) * KD, stream());
    const std::pair<const char*, std::pair<const bf16*, int>> qkv[] = {
        {"q", {dq.get(), QD}}, {"k", {dk.get(), KD}}, {"v", {dv.get(), KD}}};
    bool accumulate = false;
    for (const auto& [name, d] : qkv) {
      gemm_.backward_input(dln1.get(), d.first, p(l + "w" + name), N, C, d.second, accumulate);
      gemm_.backward_weight(g(l + "w" + name), d.first, a.ln1.get(), N, C, d.second);
      if (gpt()) cuda::bias_backward(g(l + "b" + name), d.first, N, d.second, stream());
      accumulate = true;
    }
    tp_sum(dln1.get(), n * C);
    // dx = dx2 + the first norm's input gradient (into dx2's buffer, which is returned).
    norm_backward(dx2.get(), dln1.get(), a.x.get(), a.ln1_mean.get(), a.ln1_rstd.get(), l + "ln1_w", l + "ln1_b", N);
    cuda::check_launch("the backward of layer " + std::to_string(layer));
    return dx2;
  }

  model::Shape s_;
  int first_, last_;
  int tp_rank_, tp_;
  int Hs_ = 0, KHs_ = 0, Fs_ = 0;  // this TP shard's query heads, key-value heads and MLP channels
  int Tl_ = 0, pos0_ = 0;          // this context member's time steps per sequence and its first
  Recompute recompute_;
  model::Comm<float> comm_;                                // StageSpec's: the TP sum through the host, the CP exchanges
  std::function<void(float*, std::size_t)> tp_device_;  // StageSpec's tp_all_reduce_device
  cuda::DeviceLedger ledger_;  // every device buffer below counts here (declared first: freed last)
  cuda::Stream stream_;
  cuda::Gemm gemm_;
  model::StageModel<float> host_;  // the fp32 master parameters (host mirrors); its own kernels never run
  std::vector<DeviceParam> params_;
  std::vector<DeviceBucket> buckets_;  // the step on the device (device_optimizer); none while the host steps
  std::unordered_map<std::string, std::size_t> index_;
  std::map<int, Acts> in_flight_;
  Buf<float> staging_;  // fp32 host <-> device staging, grown as needed
  DeviceCounters counters_;
  bool computing_ = false;  // inside forward_device or backward_device (Computing)
  // The page-locked staging of finish_backward and zero_grad: all parameters, or kPinnedFloats at a time.
  static constexpr std::size_t kPinnedFloats = std::size_t(32) << 20;  // 128 MiB
  cuda::PinnedBuffer<float> pinned_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::string name) : device_(device), name_(std::move(name)) {}
  std::string name() const override { return "cuda"; }
  std::string describe() const override { return "cuda (device " + std::to_string(device_) + ": " + name_ + ", bf16)"; }
  std::unique_ptr<Stage> make_stage(const StageSpec& spec) override {
    cuda::check(cudaSetDevice(device_), "cudaSetDevice");
    // Activations come from the stream-ordered pool; keep freed memory in it across the
    // synchronisations at every forward/backward instead of returning it to the driver.
    cudaMemPool_t pool = nullptr;
    cuda::check(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    cuda::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
    return std::make_unique<CudaStage>(spec);
  }

 private:
  int device_;
  std::string name_;
};

}  // namespace

Result<std::unique_ptr<Backend>> open_cuda(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return Diagnostic{"", 0, 0, "backend", std::string("no CUDA device: ") + cudaGetErrorString(err)};
  if (count == 0) return Diagnostic{"", 0, 0, "backend", "no CUDA device: the CUDA runtime sees none"};
  if (device >= count)
    return Diagnostic{"", 0, 0, "backend",
                      "no CUDA device: device " + std::to_string(device) + " asked for, the CUDA runtime sees " + std::to_string(count)};
  cudaDeviceProp prop{};
  if ((device < 0 && cudaGetDevice(&device) != cudaSuccess) || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return Diagnostic{"", 0, 0, "backend", "no CUDA device: cannot query the current device"};
  if (prop.major < 8)
    return Diagnostic{"", 0, 0, "backend",
                      std::string("no CUDA device: ") + prop.name + " (compute capability " + std::to_string(prop.major) + "." +
                          std::to_string(prop.minor) + ") has no bf16 tensor cores; the CUDA backend needs 8.0 or newer"};
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device, prop.name));
}

}  // namespace het::backend
