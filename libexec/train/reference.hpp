#pragma once
// Single-device training: the whole model on one device, the global batch in micro-batches
// with gradient accumulation, AdamW. The reference every parallel plan must reproduce.
#include <cstdint>
#include <vector>

#include "data/data.hpp"
#include "model/params.hpp"
#include "spec/model.hpp"

namespace het::train {

struct Settings {
  int steps = 10;
  int micro_batch_size = 1;  // sequences per forward/backward
  std::uint64_t seed = 1;
  model::AdamW optimizer;
};

// Mean token loss of every step (before its update).
template <class T>
std::vector<double> train_reference(const ModelSpec& spec, const data::Batches& batches, const Settings& settings);

}  // namespace het::train
