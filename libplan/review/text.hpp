#pragma once
// Numbers in the sentences of `hetplan diff` and `hetplan check` (internal to libplan/review).
#include <cmath>
#include <cstdio>
#include <string>

namespace het::review::text {

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "1.23 s", "4.56 ms", "7.8 us"
inline std::string seconds(double s) {
  if (std::abs(s) >= 1) return fmt("%.2f s", s);
  if (std::abs(s) >= 1e-3) return fmt("%.2f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

}  // namespace het::review::text
