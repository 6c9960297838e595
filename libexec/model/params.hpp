#pragma once
// Parameters of one model shard: values, gradients and AdamW state, initialised from
// (seed, parameter name, element index in the FULL tensor) so that every plan — however it
// shards and places the model — starts from identical weights.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace het::model {

// GPT-2 style initialisation of a parameter element.
enum class Init { normal, normal_scaled_out, zeros, ones };

// The value of element `index` of parameter `name` (its position in the unsharded tensor).
double initial_value(std::uint64_t seed, const std::string& name, std::int64_t index, Init init, int num_layers);

template <class T>
struct Param {
  std::string name;           // e.g. "layer3.wq"
  std::vector<T> value, grad;
  std::vector<T> m, v;        // AdamW moments (allocated on the first step)
};

// Fills `p` (already sized) from the full tensor: local element i sits at global index
// global(i) of a full tensor.
template <class T>
void initialise(Param<T>& p, std::uint64_t seed, Init init, int num_layers, const std::function<std::int64_t(std::int64_t)>& global);

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
