#include "units/units.hpp"

#include <array>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <optional>

namespace het::units {
namespace {

struct Unit {
  std::string_view name;
  Dimension dimension;
  double scale;  // base units per one of this unit
};

constexpr double kKi = 1024.0;
constexpr std::array kUnits = {
    Unit{"B", Dimension::bytes, 1},
    Unit{"kB", Dimension::bytes, 1e3},
    Unit{"KB", Dimension::bytes, 1e3},
    Unit{"MB", Dimension::bytes, 1e6},
    Unit{"GB", Dimension::bytes, 1e9},
    Unit{"TB", Dimension::bytes, 1e12},
    Unit{"PB", Dimension::bytes, 1e15},
    Unit{"KiB", Dimension::bytes, kKi},
    Unit{"MiB", Dimension::bytes, kKi * kKi},
    Unit{"GiB", Dimension::bytes, kKi * kKi * kKi},
    Unit{"TiB", Dimension::bytes, kKi * kKi * kKi * kKi},
    Unit{"PiB", Dimension::bytes, kKi * kKi * kKi * kKi * kKi},
    Unit{"B/s", Dimension::bandwidth, 1},
    Unit{"kB/s", Dimension::bandwidth, 1e3},
    Unit{"KB/s", Dimension::bandwidth, 1e3},
    Unit{"MB/s", Dimension::bandwidth, 1e6},
    Unit{"GB/s", Dimension::bandwidth, 1e9},
    Unit{"TB/s", Dimension::bandwidth, 1e12},
    Unit{"KiB/s", Dimension::bandwidth, kKi},
    Unit{"MiB/s", Dimension::bandwidth, kKi * kKi},
    Unit{"GiB/s", Dimension::bandwidth, kKi * kKi * kKi},
    Unit{"TiB/s", Dimension::bandwidth, kKi * kKi * kKi * kKi},
    Unit{"bit/s", Dimension::bandwidth, 1.0 / 8},
    Unit{"kbit/s", Dimension::bandwidth, 1e3 / 8},
    Unit{"Kbit/s", Dimension::bandwidth, 1e3 / 8},
    Unit{"Mbit/s", Dimension::bandwidth, 1e6 / 8},
    Unit{"Gbit/s", Dimension::bandwidth, 1e9 / 8},
    Unit{"Tbit/s", Dimension::bandwidth, 1e12 / 8},
    Unit{"bps", Dimension::bandwidth, 1.0 / 8},
    Unit{"kbps", Dimension::bandwidth, 1e3 / 8},
    Unit{"Kbps", Dimension::bandwidth, 1e3 / 8},
    Unit{"Mbps", Dimension::bandwidth, 1e6 / 8},
    Unit{"Gbps", Dimension::bandwidth, 1e9 / 8},
    Unit{"Tbps", Dimension::bandwidth, 1e12 / 8},
    Unit{"ns", Dimension::time, 1e-9},
    Unit{"us", Dimension::time, 1e-6},
    Unit{"\xC2\xB5s", Dimension::time, 1e-6},  // µs
    Unit{"ms", Dimension::time, 1e-3},
    Unit{"s", Dimension::time, 1},
    Unit{"min", Dimension::time, 60},
    Unit{"h", Dimension::time, 3600},
    Unit{"FLOPS", Dimension::flops, 1},
    Unit{"kFLOPS", Dimension::flops, 1e3},
    Unit{"KFLOPS", Dimension::flops, 1e3},
    Unit{"MFLOPS", Dimension::flops, 1e6},
    Unit{"GFLOPS", Dimension::flops, 1e9},
    Unit{"TFLOPS", Dimension::flops, 1e12},
    Unit{"PFLOPS", Dimension::flops, 1e15},
    Unit{"FLOP/s", Dimension::flops, 1},
    Unit{"GFLOP/s", Dimension::flops, 1e9},
    Unit{"TFLOP/s", Dimension::flops, 1e12},
    Unit{"PFLOP/s", Dimension::flops, 1e15},
    Unit{"USD/h", Dimension::price, 1.0 / 3600},
    Unit{"USD/s", Dimension::price, 1},
};

const Unit* find_unit(std::string_view name) {
  for (const auto& u : kUnits)
    if (u.name == name) return &u;
  return nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string shortest(double v) {
  // 15 significant digits drop the noise of dividing by a unit's scale (399.99999999999994
  // -> 400) and still read back to within 1e-15.
  std::array<char, 64> buf{};
  std::snprintf(buf.data(), buf.size(), "%.15g", v);
  return buf.data();
}

}  // namespace

const char* dimension_name(Dimension d) {
  switch (d) {
    case Dimension::bytes: return "size";
    case Dimension::bandwidth: return "bandwidth";
    case Dimension::time: return "time";
    case Dimension::flops: return "compute rate";
    case Dimension::price: return "price";
  }
  return "quantity";
}

const char* dimension_example(Dimension d) {
  switch (d) {
    case Dimension::bytes: return "40GiB";
    case Dimension::bandwidth: return "25Gbit/s";
    case Dimension::time: return "2us";
    case Dimension::flops: return "312TFLOPS";
    case Dimension::price: return "2.21USD/h";
  }
  return "";
}

Parsed parse(std::string_view text, Dimension dimension) {
  const std::string expected =
      std::string("expected a ") + dimension_name(dimension) + " like " + dimension_example(dimension);
  std::string_view s = trim(text);
  if (s.empty()) return {0, expected + ", got nothing"};
  if (s.front() == '+') s.remove_prefix(1);
  double number = 0;
  auto [rest, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || rest == s.data())
    return {0, expected + ", got '" + std::string(text) + "' (it does not start with a number)"};
  if (!std::isfinite(number)) return {0, expected + ", got '" + std::string(text) + "' (not a finite number)"};
  std::string_view unit_text = trim(std::string_view(rest, s.data() + s.size() - rest));
  if (unit_text.empty())
    return {0, expected + ", got the bare number '" + std::string(text) + "' (a unit is required)"};
  const Unit* unit = find_unit(unit_text);
  if (unit == nullptr)
    return {0, expected + ", got '" + std::string(text) + "' (unknown unit '" + std::string(unit_text) + "')"};
  if (unit->dimension != dimension)
    return {0, expected + ", got '" + std::string(text) + "', which is a " + dimension_name(unit->dimension)};
  return {number * unit->scale, {}};
}

std::string format(double value, Dimension dimension) {
  // Among the units of the dimension in which the magnitude is at least 1, the shortest
  // text wins (40GiB rather than 42.94967296GB, 16GB rather than 15625000KiB); on a tie the
  // larger unit. Units that only differ in spelling (kB/KB, bps/bit/s) are skipped.
  std::string best;
  double best_scale = 0;
  for (const auto& u : kUnits) {
    if (u.dimension != dimension || u.name == "kB" || u.name == "kbit/s" || u.name == "Kbit/s" ||
        u.name.find("bps") != std::string_view::npos || u.name.find("FLOP/s") != std::string_view::npos ||
        u.name == "\xC2\xB5s" || u.name == "min" || u.name == "h" || u.name == "kFLOPS" || u.name == "KFLOPS" ||
        u.name == "MFLOPS" || u.name == "USD/s")
      continue;
    if (value != 0 && std::fabs(value) < u.scale) continue;
    std::string text = shortest(value / u.scale) + std::string(u.name);
    if (best.empty() || text.size() < best.size() || (text.size() == best.size() && u.scale > best_scale))
      best = text, best_scale = u.scale;
  }
  if (best.empty()) {  // smaller than the smallest unit
    for (const auto& u : kUnits)
      if (u.dimension == dimension) return shortest(value / u.scale) + std::string(u.name);
  }
  return best;
}

}  // namespace het::units
