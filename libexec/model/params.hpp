#pragma once
// Parameters of one model shard: values, gradients and AdamW state, initialised from
// (seed, parameter name, element index in the FULL tensor) so that every plan — however it
// shards and places the model — starts from identical weights.
#include <cstdint>
#include <string>
#include <vector>

#include "program/shards.hpp"

namespace het::model {

// GPT-2 style initialisation of a parameter element.
enum class Init { normal, normal_scaled_out, zeros, ones };

// The value of element `index` of parameter `name` (its position in the unsharded tensor).
double initial_value(std::uint64_t seed, const std::string& name, std::int64_t index, Init init, int num_layers);

// Where a shard's elements sit in the full tensor: the planner's description (program/shards.hpp),
// so that what a rank holds is what the planner counts.
using Slice = program::Slice;

template <class T>
struct Param {
  std::string name;           // e.g. "layer3.wq"
  Slice slice;                // which part of the full tensor this is
  std::vector<T> value, grad;
  std::vector<T> m, v;        // AdamW moments (allocated on the first step)
};

// Sizes `p` to its slice and fills it from the full tensor (element i from global index
// p.slice.global(i)); zeroes its gradient.
template <class T>
void initialise(Param<T>& p, std::uint64_t seed, Init init, int num_layers);

struct AdamW {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};
// Whether AdamW decays a parameter: matrices only (names without ".b", "ln", "norm").
bool decays(const std::string& name);
// AdamW (step counts from 1) on n elements: value, grad and the moments m, v of those
// elements. Elementwise, so a sharded optimizer (ZeRO-1) updates any slice on its own.
template <class T>
void adamw_update(T* value, const T* grad, T* m, T* v, std::size_t n, const AdamW& opt, int step, bool decay);
// One AdamW step on a whole parameter (moments allocated on the first step).
template <class T>
void adamw_step(Param<T>& p, const AdamW& opt, int step);

}  // namespace het::model
