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
  for (auto& c : plan_sync(plan, topo, me, local)) {  // by group, in the groups' order
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

Result<Done> on_device(std::vector<Bucket>& buckets, backend::Stage& stage) {
  std::vector<backend::BucketLayout> layouts;
  const auto params = stage.params();
  for (const auto& b : buckets) {
    backend::BucketLayout& l = layouts.emplace_back();
    for (const auto& p : b.parts) {
      const Elements& e = p.chunk.elements;
      l.parts.push_back({p.chunk.param, e.start, e.run, e.stride, e.count, p.chunk.weight, p.at});
      if (params.at(p.chunk.param) != p.param) return failure(ErrorKind::internal, "a bucket's parameter is not the stage's");
    }
    l.size = b.size, l.lo = b.lo, l.hi = b.hi;
    l.padded = b.comm && b.comm->device_memory() ? b.comm->padded(b.size) : b.size;
  }
  backend::DeviceOptimizer* device = nullptr;
  try {
    device = stage.device_optimizer(std::move(layouts));
  } catch (const std::exception& e) {
    return failure(ErrorKind::internal, std::string("the device's optimizer: ") + e.what());
  }
  if (!device) return Done{};
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = buckets[i];
    b.device = device, b.index = i;
    b.m = {}, b.v = {};  // on the device; pull_state() fills them for a checkpoint
    if (b.group.size() <= 1 || b.comm->device_memory()) b.grad = {}, b.value = {};
  }
  return Done{};
}

void pull_state(std::vector<Bucket>& buckets) {
  if (buckets.empty() || !buckets.front().device) return;
  buckets.front().device->pull_values();
  for (auto& b : buckets) {
    b.m.resize(b.hi - b.lo), b.v.resize(b.hi - b.lo);
    const auto [m, v] = b.device->moments(b.index);
    b.device->to_host(b.m.data(), m, b.m.size());
    b.device->to_host(b.v.data(), v, b.v.size());
  }
}

void push_state(std::vector<Bucket>& buckets) {
  if (buckets.empty() || !buckets.front().device) return;
  buckets.front().device->push_values();
  for (auto& b : buckets) {
    const auto [m, v] = b.device->moments(b.index);
    b.device->to_device(m, b.m.data(), b.m.size());
    b.device->to_device(v, b.v.data(), b.v.size());
  }
}

namespace {

// op on the device bucket's `device` buffer: in place where the group takes device memory,
// else through the host buffer `host` [size].
template <class HostOp>
Result<Done> on_group(Bucket& b, collective::Group::Op op, float* device, std::vector<float>& host, HostOp&& host_op) {
  if (b.comm->device_memory()) return b.comm->on_device(op, device, b.size);
  b.device->to_host(host.data(), device, b.size);
  if (auto r = host_op(host.data()); !r) return r;
  b.device->to_device(device, host.data(), b.size);
  return Done{};
}

}  // namespace

Result<Done> sum_gradients(Bucket& b, bool zero) {
  if (b.group.size() <= 1) return Done{};
  auto host_op = [&](float* data) { return zero ? b.comm->reduce_scatter_sum(data, b.size) : b.comm->all_reduce_sum(data, b.size); };
  if (!b.device) return host_op(b.grad.data());
  using Op = collective::Group::Op;
  return on_group(b, zero ? Op::reduce_scatter_sum : Op::all_reduce_sum, b.device->gradients(b.index), b.grad, host_op);
}

Result<Done> gather_values(Bucket& b) {
  if (b.group.size() <= 1) return Done{};
  auto host_op = [&](float* data) { return b.comm->all_gather(data, b.size); };
  if (!b.device) return host_op(b.value.data());
  return on_group(b, collective::Group::Op::all_gather, b.device->values(b.index), b.value, host_op);
}

void pack_gradients(Bucket& b) {
  if (b.device) return b.device->pack_gradients(b.index);
  pack(b, &P::grad, b.grad, true);
}

void update(Bucket& b, const model::AdamW& adamw, int step, bool zero) {
  if (b.device) return b.device->update(b.index, adamw, step, !zero || b.group.size() <= 1);
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

void unpack_values(Bucket& b) {
  if (b.device) return b.device->unpack_values(b.index);
  copy_parts(b, &P::value, b.value, false, false);
}

}  // namespace het::runtime
