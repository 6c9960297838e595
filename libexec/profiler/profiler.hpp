#pragma once
// `hetexec profile`: measures each unit's forward, backward and recompute time and its memory
// on a backend, per (tp, micro-batch size), after warm-up runs, the median of several, and
// returns them as a hetplan.profile/v1 so hetplan plans from measurements.
//   - embedding and head alone; a layer: the whole model minus them, over the number of layers
//     (a layer alone stays in cache and runs faster than it does among the others);
//   - tp > 1: one TP shard's compute (its share of heads and MLP channels); the all-reduces
//     are the cost model's, from the link bandwidths, not measured here;
//   - recompute: the forward again (what activation recomputation runs before a backward);
//   - activation memory: the bytes a micro-batch keeps from its forward to its backward;
//     parameter memory: the unit's weights on one device.
// `slowdown` multiplies the times, for an emulated slower device (--emulate-devices).
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::profiler {

struct Options {
  std::vector<int> micro_batch_sizes = {1, 2, 4};
  std::vector<int> tp = {1};
  int repeats = 5;
  double slowdown = 1;
  std::string device = "cpu";
};

// Errors: a tp that does not divide the heads, kv heads and MLP channels. on_row reports
// progress (one call per measured (unit, tp, micro-batch) row).
Result<ProfileSpec> profile(backend::Backend& backend, const ModelSpec& model, const Options& options,
                            const std::function<void(const ProfileRow&)>& on_row = {});

}  // namespace het::profiler
