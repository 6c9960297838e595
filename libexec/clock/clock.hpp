#pragma once
// Waiting until a moment on the steady clock, on time: what the emulation of slower devices
// (runtime/pace.hpp) and of slower links (transport/tcp.hpp's shaping) rests on.
//
// A plain sleep ends late by the wake-up's latency (on the 2-core VM of docs/executor.md:
// median 70-80 us, 90th percentile ~200 us, for sleeps of 50 us to 3 ms), which a link's
// latency or a stretched operation would carry as an error on every frame and every
// operation. sleep_until() sleeps to kSpin before the moment and spins the rest.
#include <chrono>
#include <thread>

namespace het::clock {

using Clock = std::chrono::steady_clock;

inline void sleep_until(Clock::time_point until) {
  constexpr auto kSpin = std::chrono::microseconds(150);
  if (until - Clock::now() > kSpin) std::this_thread::sleep_until(until - kSpin);
  while (Clock::now() < until) {
  }
}

}  // namespace het::clock
