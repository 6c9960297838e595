#include "runtime/buckets.hpp"

#include <algorithm>

namespace het::runtime {

namespace {

using P = model::Param<float>;

// The bucket's elements of every part's `of` (value or grad) to `flat`.
void pack(Bucket& b, std::vector<float> P::*of, std::vector<float>& flat, bool weighted) {
  for (const auto& p : b.parts) {
    const auto& src = p.param->*of;
    const float w = weighted ? p.chunk.weight : 1.0f;
    const Elements& e = p.chunk.elements;
    for (std::size_t r = 0; r < e.count; ++r)
      for (std::size_t j = 0; j < e.run; ++j) flat[p.at + r * e.run + j] = src[e.start + r * e.stride + j] * w;
  }
}

// The packed buffers; the moments come with the part the bucket owns (connect(), whole_bucket()),
// so that a ZeRO rank never holds more than its share of them.
void prepare(Bucket& b) {
  b.hi = b.size;
  b.grad.resize(b.size), b.value.resize(b.size);
}

}  // namespace

std::vector<Bucket> buckets_of(const Plan& plan, const program::Topology& topo, int me, const std::vector<P*>& params) {
  std::vector<LocalParam> local;
  for (const auto* p : params) local.push_back({p->name, p->value.size()});
  std::vector<Bucket> out;
  for (auto& c : plan_sync(plan, topo, me, local)) {  // in (group, name, chunk) order
    if (out.empty() || out.back().group != c.group) out.push_back({c.group, nullptr, {}, 0, 0, 0, {}, {}, {}, {}});
    Bucket& b = out.back();
    const std::size_t n = c.elements.size();
    P* param = params[c.param];
    b.parts.push_back({std::move(c), param, b.size});
    b.size += n;
  }
  for (auto& b : out) prepare(b);
  return out;
}

Bucket whole_bucket(const std::vector<P*>& params) {
  Bucket b;
  b.group = {0};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::size_t n = params[i]->value.size();
    SyncChunk c{{0}, i, 0, Elements{0, n, n, 1}, 1.0f};
    b.parts.push_back({std::move(c), params[i], b.size});
    b.size += params[i]->value.size();
  }
  prepare(b);
  b.m.assign(b.size, 0.0f), b.v.assign(b.size, 0.0f);
  return b;
}

std::string connect(std::vector<Bucket>& buckets, collective::Fabric& fabric, std::uint32_t tag, bool zero) {
  for (auto& b : buckets) {
    auto comm = fabric.group(b.group, tag);
    if (!comm) return comm.errors().front().to_string();
    b.comm = *comm;
    const collective::Range own = zero ? b.comm->owned(b.size) : collective::Range{0, b.size};
    b.lo = own.lo, b.hi = own.hi;
    b.m.assign(b.hi - b.lo, 0.0f), b.v.assign(b.hi - b.lo, 0.0f);
  }
  return "";
}

void pack_gradients(Bucket& b) { pack(b, &P::grad, b.grad, true); }

void update(Bucket& b, const model::AdamW& adamw, int step, bool zero) {
  pack(b, &P::value, b.value, false);
  for (const auto& p : b.parts) {  // the owned part of each parameter's slice
    const std::size_t lo = std::max(b.lo, p.at), hi = std::min(b.hi, p.at + p.chunk.elements.size());
    if (lo >= hi) continue;
    model::adamw_update(b.value.data() + lo, b.grad.data() + lo, b.m.data() + (lo - b.lo), b.v.data() + (lo - b.lo), hi - lo, adamw,
                        step, model::decays(p.param->name));
  }
  if (!zero || b.group.size() <= 1) unpack_values(b);
}

void unpack_values(Bucket& b) {
  for (const auto& p : b.parts) {
    auto& dst = p.param->value;
    const Elements& e = p.chunk.elements;
    for (std::size_t r = 0; r < e.count; ++r)
      for (std::size_t j = 0; j < e.run; ++j) dst[e.start + r * e.stride + j] = b.value[p.at + r * e.run + j];
  }
}

}  // namespace het::runtime
