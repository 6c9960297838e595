#pragma once
// Helpers shared by unit tests: parse YAML text as if it were a file.
#include <string>

#include "input/input.hpp"
#include "spec/catalog.hpp"
#include "validation/inputs.hpp"

namespace het::test {

inline input::Document doc(const std::string& text, const std::string& name = "test.yaml") {
  auto d = input::parse(text, name);
  if (!d) throw std::runtime_error(to_string(d.errors()));
  return *d;
}

inline const DeviceCatalog& catalog() {
  static const DeviceCatalog c = [] {
    auto r = builtin_catalog();
    if (!r) throw std::runtime_error(to_string(r.errors()));
    return *r;
  }();
  return c;
}

// tests/data/plans/mixed.plan.json for tiny-gpt on the demo cluster, loaded as `hetplan
// validate` loads it: 3 stages, a100 tp 2 (devices 0, 1), a100 dp 2 (2, 3), v100 (0).
inline Plan mixed_plan() {
  InputFiles files;
  files.plan = HET_SOURCE_DIR "/tests/data/plans/mixed.plan.json";
  files.model = HET_SOURCE_DIR "/configs/models/tiny-gpt.yaml";
  files.cluster = HET_SOURCE_DIR "/configs/clusters/demo-1x4a100-1x4v100.yaml";
  auto loaded = load_plan_inputs(files);
  if (!loaded) throw std::runtime_error(to_string(loaded.errors()));
  return loaded->plan;
}

// All diagnostics as one text, for Contains() matchers.
inline std::string text(const Diagnostics& d) { return to_string(d); }

}  // namespace het::test
