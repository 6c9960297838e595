#include "model/params.hpp"

#include <cmath>

namespace het::model {

namespace {
std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
std::uint64_t hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

double initial_value(std::uint64_t seed, const std::string& name, std::int64_t index, Init init, int num_layers) {
  if (init == Init::zeros) return 0;
  if (init == Init::ones) return 1;
  const std::uint64_t a = splitmix(seed ^ hash(name) ^ splitmix(std::uint64_t(index)));
  const std::uint64_t b = splitmix(a);
  const double u1 = (double((a >> 11) + 1)) / 9007199254740993.0;  // (0, 1]
  const double u2 = double(b >> 11) / 9007199254740992.0;
  const double normal = std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  const double std = init == Init::normal_scaled_out ? 0.02 / std::sqrt(2.0 * num_layers) : 0.02;
  return normal * std;
}

template <class T>
void initialise(Param<T>& p, std::uint64_t seed, Init init, int num_layers) {
  p.value.assign(std::size_t(p.slice.elements()), T(0));
  for (std::size_t i = 0; i < p.value.size(); ++i)
    p.value[i] = T(initial_value(seed, p.name, p.slice.global(std::int64_t(i)), init, num_layers));
  p.grad.assign(p.value.size(), T(0));
}

bool decays(const std::string& name) {
  return name.find(".b") == std::string::npos && name.find("ln") == std::string::npos && name.find("norm") == std::string::npos;
}

template <class T>
void adamw_update(T* value, const T* grad, T* mom1, T* mom2, std::size_t n, const AdamW& o, int step, bool decay) {
  const double c1 = 1 - std::pow(o.beta1, step), c2 = 1 - std::pow(o.beta2, step);
  for (std::size_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double m = o.beta1 * mom1[i] + (1 - o.beta1) * g;
    const double v = o.beta2 * mom2[i] + (1 - o.beta2) * g * g;
    mom1[i] = T(m), mom2[i] = T(v);
    const double update = (m / c1) / (std::sqrt(v / c2) + o.eps) + (decay ? o.weight_decay * value[i] : 0.0);
    value[i] = T(value[i] - o.lr * update);
  }
}

template <class T>
void adamw_step(Param<T>& p, const AdamW& o, int step) {
  if (p.m.empty()) p.m.assign(p.value.size(), T(0)), p.v.assign(p.value.size(), T(0));
  adamw_update(p.value.data(), p.grad.data(), p.m.data(), p.v.data(), p.value.size(), o, step, decays(p.name));
}

template void initialise<float>(Param<float>&, std::uint64_t, Init, int);
template void initialise<double>(Param<double>&, std::uint64_t, Init, int);
template void adamw_update<float>(float*, const float*, float*, float*, std::size_t, const AdamW&, int, bool);
template void adamw_update<double>(double*, const double*, double*, double*, std::size_t, const AdamW&, int, bool);
template void adamw_step<float>(Param<float>&, const AdamW&, int);
template void adamw_step<double>(Param<double>&, const AdamW&, int);

}  // namespace het::model
