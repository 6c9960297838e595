#pragma once
// Quantities with units, as users write them in specs: `40GiB`, `300GB/s`, `200Gbit/s`,
// `2us`, `1ms`, `312TFLOPS`, `2.21USD/h`. Values are held in base SI units: bytes, bytes per
// second, seconds, FLOP per second, US dollars per second. A bare number is never accepted: units are required so that
// `bandwidth: 25` cannot silently mean 25 B/s when the user meant 25 Gbit/s.
#include <string>
#include <string_view>

namespace het::units {

enum class Dimension { bytes, bandwidth, time, flops, price };

// "size", "bandwidth", "time", "compute rate", "price"
const char* dimension_name(Dimension d);
// An example a user can copy, e.g. "40GiB" or "25Gbit/s"; used in error messages.
const char* dimension_example(Dimension d);

struct Parsed {
  double value = 0;    // in base units; meaningful when error is empty
  std::string error;   // empty on success, else a sentence for people
  bool ok() const { return error.empty(); }
};

// Parses "<number>[ ]<unit>". Accepted units:
//   bytes:     B, kB/KB, MB, GB, TB, PB (powers of 1000), KiB, MiB, GiB, TiB, PiB
//   bandwidth: any byte unit followed by /s; bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s; bps, kbps, Mbps, Gbps, Tbps
//   time:      ns, us, µs, ms, s, min, h
//   flops:     FLOPS, kFLOPS, MFLOPS, GFLOPS, TFLOPS, PFLOPS (also written FLOP/s)
//   price:     USD/h, USD/s (a device's rent; written USD/h)
// Negative numbers parse (range checks belong to the caller); NaN and infinity do not.
Parsed parse(std::string_view text, Dimension dimension);

// The shortest text that parse() reads back to (nearly) the same value, in a readable unit.
std::string format(double value, Dimension dimension);

}  // namespace het::units
