#pragma once
// Quick measurements of this machine, for `hetexec devices --format cluster`
// (node/cluster_yaml.hpp): what one CPU core computes and copies, and what hetexec's TCP
// transport carries between two ranks over loopback. Each takes a fraction of a second and
// measures the machine as it is at the time: each number is the median of repeated runs
// (profiler/sampling.hpp) with the relative half-width of its 95% interval.
#include <cstddef>
#include <utility>
#include <vector>

#include "diag/diag.hpp"

namespace het::node {

struct Measured {
  double value = 0;   // median
  double spread = 0;  // relative half-width of the 95% interval of the median
  int runs = 0;
};

struct CoreRates {
  // fp32 FLOP/s of an n x n x n GEMM (model::matmul_forward: the CPU backend's Eigen GEMM) on
  // one thread, by that thread's CPU time (time descheduled by other processes not counted).
  Measured gemm_flops;
  int gemm_n = 256;
  // Bytes per second one thread moves with memcpy between two buffers of copy_bytes, counted
  // read + written as STREAM's Copy counts them, by the thread's CPU time.
  Measured copy_bandwidth;
  std::size_t copy_bytes = std::size_t(64) << 20;
};
// Runs on the calling thread alone (a oneTBB arena of one thread), at most about
// seconds_each of wall time per measurement.
CoreRates measure_core(double seconds_each = 0.2);

struct LoopbackLink {
  Measured latency;    // seconds one way: half the median round trip of an 8-byte message
  Measured bandwidth;  // bytes per second one way: 1 / the slope of the least-squares line
                       // through the median one-way times of 8 B, 256 KiB, 1 MiB and 4 MiB
  std::size_t largest = std::size_t(4) << 20;
  std::vector<std::pair<std::size_t, Measured>> one_way;  // (message bytes, median one-way seconds) the fit is of
};
// Two ranks of transport::Peers (transport/tcp.hpp: framed messages, a sender and a reader
// thread per peer, as the runtime uses them) in two threads of this process, connected on
// 127.0.0.1 through a directory rendezvous in a fresh temporary directory, bounce messages of
// each size; about seconds_each of wall time per size at most. Errors: the connection or a
// message failed (why, in words).
//
// With shaped_latency > 0 both directions are shaped links of that latency (and no bandwidth
// limit: Peers::shape), as an emulated link of a dilated run is, each round trip follows a pause
// of 1 ms (a rank computing between messages), and the times reported are what the transport
// adds to the link: half the round trip less shaped_latency, which is how late the transport
// delivers a shaped message (transport/tcp.hpp: a frame is due when the link would deliver it;
// the threads that carry it wake within that time, or late). On the 2-core VM of
// docs/executor.md: 36-58 us one way hot and unshaped, under 1 us beyond 120-480 us of shaping,
// 41-71 us beyond 30-60 us (bench/bench_link.cpp).
Result<LoopbackLink> measure_loopback(double seconds_each = 0.15, double shaped_latency = 0);

}  // namespace het::node
