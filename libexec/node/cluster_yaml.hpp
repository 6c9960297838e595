#pragma once
// This machine as a hetplan cluster (cluster.yaml, docs/inputs.md), for `hetexec devices
// --format cluster`: one node, one subcluster, so that a newcomer plans for the hardware they
// have. The text says in comments what was measured, how and when, and where every other
// number comes from; read_cluster() reads it back (the caller checks).
//   - CUDA GPUs present: a subcluster of the GPUs, named after the host, of the device
//     catalog's type (the type `hetexec profile --backend cuda` names its profile after), with
//     the memory CUDA reports; peak, memory bandwidth and the intra-node link are the
//     catalog's datasheet values. The CPU cores are not offered (a plan runs on the GPUs).
//   - Otherwise: a subcluster of CPU devices of type `cpu` (what `hetexec profile` names its
//     profile by default), one per online core (a rank per core), each with MemTotal / cores
//     of memory, a peak of one core's measured fp32 GEMM rate, one core's measured memcpy
//     bandwidth, and the measured loopback link of hetexec's TCP transport between two ranks.
#include <optional>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "node/measure.hpp"
#include "node/node.hpp"
#include "spec/catalog.hpp"

namespace het::node {

struct MachineFacts {
  NodeInfo node;
  std::vector<std::string> gpu_types;   // the catalog type of each of node.gpus ("" when it has none)
  std::optional<CoreRates> core;        // required without GPUs
  std::optional<LoopbackLink> loopback; // required without GPUs
  std::string measured_at;              // when, e.g. 2026-11-23T10:15:02Z
  std::string version;                  // of hetexec
};

// A valid subcluster (and cluster) name from a hostname: letters, digits, '_', '.' and '-'
// kept, anything else '-'; "host" when nothing is left.
std::string name_from_hostname(const std::string& hostname);

// The cluster YAML text. Errors: GPUs of no catalog type or of several types (a cluster's
// subcluster has one), or a CPU-only machine without its measurements.
Result<std::string> cluster_yaml(const MachineFacts& facts, const DeviceCatalog& catalog);

}  // namespace het::node
