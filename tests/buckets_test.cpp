// The optimizer step's buckets (libexec/runtime/buckets): packing the gradients, AdamW and
// unpacking the values run on oneTBB's threads in blocks that split inside a parameter (a
// strided TP slice, one long row as an embedding is). Held against the serial definition: every
// element where Elements::index says, times its weight, AdamW element by element — the same
// bits with one thread and with many.
#include <catch2/catch.hpp>
#include <tbb/global_control.h>

#include <cstdint>
#include <cstring>

#include "runtime/buckets.hpp"

using namespace het;

namespace {

struct Fixture {
  std::vector<model::Param<float>> params;
  runtime::Bucket bucket;
};

// Three parameters: a strided slice spanning many blocks (170 rows of 1000 at stride 1700), one
// long row (200,000 elements: an embedding's shape), a slice of short rows (3 of every 7).
Fixture make() {
  Fixture f;
  const std::vector<runtime::Elements> parts = {{5, 1000, 1700, 170}, {0, 200000, 200000, 1}, {2, 3, 7, 5000}};
  const std::vector<std::string> names = {"h.0.attn.qkv.w", "wte", "h.0.ln1.g"};
  f.params.resize(parts.size());
  std::uint32_t x = 12345;
  auto next = [&] { return (x = x * 1664525u + 1013904223u) / 4294967296.0f - 0.5f; };
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& p = f.params[i];
    p.name = names[i];
    const runtime::Elements& e = parts[i];
    p.value.resize(e.start + (e.count - 1) * e.stride + e.run + 3);
    p.grad.resize(p.value.size());
    for (auto& v : p.value) v = next();
    for (auto& g : p.grad) g = next();
    runtime::SyncChunk c{{0}, i, 0, e, i == 2 ? 0.5f : 1.0f};
    f.bucket.parts.push_back({c, &p, f.bucket.size});
    f.bucket.size += e.size();
  }
  f.bucket.group = {0};
  f.bucket.hi = f.bucket.size;
  f.bucket.grad.resize(f.bucket.size), f.bucket.value.resize(f.bucket.size);
  f.bucket.m.assign(f.bucket.size, 0.01f), f.bucket.v.assign(f.bucket.size, 0.02f);
  return f;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("buckets: packing, AdamW and unpacking split inside parameters and give the serial result, bit for bit, on any thread count") {
  Fixture want = make();
  // The serial definition.
  std::vector<float> grad(want.bucket.size), value(want.bucket.size);
  for (const auto& p : want.bucket.parts)
    for (std::size_t i = 0; i < p.chunk.elements.size(); ++i) {
      grad[p.at + i] = p.param->grad[p.chunk.elements.index(i)] * p.chunk.weight;
      value[p.at + i] = p.param->value[p.chunk.elements.index(i)];
    }
  std::vector<float> m = want.bucket.m, v = want.bucket.v;
  const model::AdamW adamw;
  for (const auto& p : want.bucket.parts)
    model::adamw_update(value.data() + p.at, grad.data() + p.at, m.data() + p.at, v.data() + p.at, p.chunk.elements.size(), adamw, 3,
                        model::decays(p.param->name));
  for (std::size_t k = 0; k < want.params.size(); ++k) {  // values back where they came from; the rest untouched
    auto& p = want.params[k];
    const auto& part = want.bucket.parts[k];
    for (std::size_t i = 0; i < part.chunk.elements.size(); ++i) p.value[part.chunk.elements.index(i)] = value[part.at + i];
  }

  for (int threads : {1, 4}) {
    INFO(threads << " threads");
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::size_t(threads));
    Fixture got = make();
    runtime::pack_gradients(got.bucket);
    CHECK(same_bits(got.bucket.grad, grad));
    runtime::update(got.bucket, adamw, 3, false);
    CHECK(same_bits(got.bucket.m, m));
    CHECK(same_bits(got.bucket.v, v));
    CHECK(same_bits(got.bucket.value, value));
    for (std::size_t k = 0; k < got.params.size(); ++k) {
      INFO(got.params[k].name);
      CHECK(same_bits(got.params[k].value, want.params[k].value));
    }
  }
}
