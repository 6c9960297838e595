#include "node/node.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace het::node {

namespace {

CpuInfo discover_cpu() {
  CpuInfo cpu;
  cpu.model = "unknown";
  cpu.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) cpu.model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  std::ifstream smt("/sys/devices/system/cpu/smt/active");  // absent on kernels without SMT control: off
  int active = 0;
  cpu.smt = (smt >> active) && active == 1;
  std::ifstream mem("/proc/meminfo");
  for (std::string line; std::getline(mem, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream in(line.substr(9));
      double kib = 0;
      in >> kib;
      cpu.memory_bytes = kib * 1024;
      break;
    }
  }
  return cpu;
}

}  // namespace

NodeInfo describe_node() {
  NodeInfo node;
  char host[256] = {};
  node.hostname = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  node.cpu = discover_cpu();
  discover_gpus(node);
  discover_rdma(node);
  return node;
}

BuildInfo build_info(const std::string& version) {
  BuildInfo b;
  b.version = version;
  describe_cuda(b);
  // What can run plans: the CPU backend, and the CUDA one when built with CUDA
  // (libexec/backend), over TCP (transport/tcp), and NCCL for the collective groups of ranks
  // with a GPU each (libexec/collective). ibverbs is linked for discovery; not yet sent over.
  b.backends = b.cuda ? std::vector<std::string>{"cpu", "cuda"} : std::vector<std::string>{"cpu"};
  b.transports = b.nccl ? std::vector<std::string>{"tcp", "nccl"} : std::vector<std::string>{"tcp"};
  return b;
}

nlohmann::ordered_json to_json(const NodeInfo& n) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array(), rdma = nlohmann::ordered_json::array();
  for (const auto& g : n.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                    {"compute_capability", g.compute_capability}, {"pci_bus_id", g.pci_bus_id}});
  for (const auto& r : n.rdma) rdma.push_back({{"name", r.name}, {"ports", r.ports}, {"guid", r.guid}});
  return {{"hostname", n.hostname},
          {"cpu", {{"model", n.cpu.model}, {"cores", n.cpu.cores}, {"smt", n.cpu.smt}, {"memory_bytes", n.cpu.memory_bytes}}},
          {"gpus", gpus},
          {"rdma", rdma},
          {"notes", n.notes}};
}

nlohmann::ordered_json to_json(const BuildInfo& b) {
  return {{"version", b.version},
          {"cuda", b.cuda},
          {"cuda_runtime", b.cuda_runtime},
          {"cuda_driver", b.cuda_driver},
          {"nccl", b.nccl},
          {"nccl_version", b.nccl_version},
          {"ibverbs", b.ibverbs},
          {"backends", b.backends},
          {"transports", b.transports}};
}

}  // namespace het::node
