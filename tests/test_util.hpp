#pragma once
// Helpers shared by unit tests: parse YAML text as if it were a file.
#include <string>

#include "input/input.hpp"
#include "spec/catalog.hpp"

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

// All diagnostics as one text, for Contains() matchers.
inline std::string text(const Diagnostics& d) { return to_string(d); }

}  // namespace het::test
