#pragma once
// `hetexec profile --backend cpu`: measures each unit's forward and backward time on this
// machine's CPU backend (tp = 1), per micro-batch size, after warm-up runs, the median of
// several (a layer: the model's stack of layers divided by their number), and returns them as
// a hetplan.profile/v1 so hetplan plans from measurements.
// `slowdown` multiplies the times, for an emulated slower device (--emulate-devices).
#include <string>
#include <vector>

#include "spec/model.hpp"
#include "spec/profile.hpp"

namespace het::profiler {

struct Options {
  std::vector<int> micro_batch_sizes = {1, 2, 4};
  int repeats = 5;
  double slowdown = 1;
  std::string device = "cpu";
};

ProfileSpec profile_cpu(const ModelSpec& model, const Options& options);

}  // namespace het::profiler
