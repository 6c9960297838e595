#include "runtime/buckets.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>

namespace het::runtime {

namespace {

using P = model::Param<float>;

// Copies between every part's parameter elements (Elements: rows of `run` at `stride`) and the
// bucket's packed buffer at p.at, in blocks of kGrain elements on oneTBB's threads (as many as
// the process allows: the CPU backend's limit, or every core) — a parameter of one long row
// (an embedding) is split too. to_flat: flat[p.at + i] = param[index(i)] * weight; else the
// other way, unweighted. Every element is written by one block and computed as alone, so the
// results are the same bits for any thread count.
constexpr std::size_t kGrain = std::size_t(1) << 16;
void copy_parts(Bucket& b, std::vector<float> P::*of, std::vector<float>& flat, bool to_flat, bool weighted) {
  tbb::parallel_for(std::size_t(0), b.parts.size(), [&](std::size_t i) {
    const Bucket::Part& p = b.parts[i];
    const Elements& e = p.chunk.elements;
    auto& param = p.param->*of;
    const float w = weighted ? p.chunk.weight : 1.0f;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, e.size(), kGrain), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t k = r.begin(); k < r.end();) {  // k: the element's place in the part; a row's piece at a time
        const std::size_t j = k % e.run, n = std::min(e.run - j, r.end() - k), at = e.index(k);
        float* f = flat.data() + p.at + k;
        if (to_flat) for (std::size_t x = 0; x < n; ++x) f[x] = param[at + x] * w;
        else std::copy_n(f, n, param.data() + at);
        k += n;
      }
    });
  });
}

// The bucket's elements of every part's `of` (value or grad) to `flat`.
void pack(Bucket& b, std::vector<float> P::*of, std::vector<float>& flat, bool weighted) { copy_parts(b, of, flat, true, weighted); }

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

Result<Done> connect(std::vector<Bucket>& buckets, collective::Fabric& fabric, std::uint32_t tag, bool zero) {
  for (auto& b : buckets) {
    auto comm = fabric.group(b.group, tag);
    if (!comm) return comm.errors();
    b.comm = *comm;
    const collective::Range own = zero ? b.comm->owned(b.size) : collective::Range{0, b.size};
    b.lo = own.lo, b.hi = own.hi;
    b.m.assign(b.hi - b.lo, 0.0f), b.v.assign(b.hi - b.lo, 0.0f);
  }
  return Done{};
}

void pack_gradients(Bucket& b) { pack(b, &P::grad, b.grad, true); }

void update(Bucket& b, const model::AdamW& adamw, int step, bool zero) {
  pack(b, &P::value, b.value, false);
  tbb::parallel_for(std::size_t(0), b.parts.size(), [&](std::size_t i) {  // the owned part of each parameter's slice
    const Bucket::Part& p = b.parts[i];
    const std::size_t lo = std::max(b.lo, p.at), hi = std::min(b.hi, p.at + p.chunk.elements.size());
    if (lo >= hi) return;
    const bool decay = model::decays(p.param->name);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(lo, hi, kGrain), [&](const tbb::blocked_range<std::size_t>& r) {
      const std::size_t at = r.begin(), n = r.size();
      model::adamw_update(b.value.data() + at, b.grad.data() + at, b.m.data() + (at - b.lo), b.v.data() + (at - b.lo), n, adamw, step, decay);
    });
  });
  if (!zero || b.group.size() <= 1) unpack_values(b);
}

void unpack_values(Bucket& b) { copy_parts(b, &P::value, b.value, false, false); }

}  // namespace het::runtime
