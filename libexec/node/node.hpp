#pragma once
// What this node is and what this build of hetexec can do with it.
//
// describe_node() discovers the node's devices: CPU cores and memory, CUDA GPUs (when the
// build has CUDA and a driver is present), RDMA devices (libibverbs). Discovery never
// fails: what cannot be queried is reported in `notes` ("no CUDA driver", ...), so an
// agent can always answer "what do you have".
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace het::node {

struct CpuInfo {
  std::string model;       // from /proc/cpuinfo, "unknown" when unreadable
  int cores = 0;           // online logical cores
  bool smt = false;        // simultaneous multithreading on: pairs of them share a physical core
  double memory_bytes = 0; // MemTotal
};

struct GpuInfo {
  int index = 0;
  std::string name;        // e.g. "NVIDIA H100 80GB HBM3"
  double memory_bytes = 0;
  int compute_capability = 0;  // major*10 + minor
  std::string pci_bus_id;
};

struct RdmaInfo {
  std::string name;        // e.g. mlx5_0
  int ports = 0;
  std::string guid;
};

struct NodeInfo {
  std::string hostname;
  CpuInfo cpu;
  std::vector<GpuInfo> gpus;
  std::vector<RdmaInfo> rdma;
  std::vector<std::string> notes;  // why something could not be discovered
};

// What the build contains (compile-time facts plus library versions found at run time).
struct BuildInfo {
  std::string version;
  bool cuda = false;
  std::string cuda_runtime;  // runtime version, "" when not built
  std::string cuda_driver;   // driver version, "" when none
  bool nccl = false;
  std::string nccl_version;
  bool ibverbs = true;       // always linked; RDMA devices may still be absent
  std::vector<std::string> backends;    // compute backends that can run plans ("cpu")
  std::vector<std::string> transports;  // transports that can carry a plan's traffic ("tcp")
};

NodeInfo describe_node();
BuildInfo build_info(const std::string& version);

nlohmann::ordered_json to_json(const NodeInfo& node);
nlohmann::ordered_json to_json(const BuildInfo& build);

// Implemented per build: with CUDA (cuda.cpp) or without (no_cuda.cpp).
void discover_gpus(NodeInfo& node);
void describe_cuda(BuildInfo& build);
// rdma.cpp
void discover_rdma(NodeInfo& node);

}  // namespace het::node
