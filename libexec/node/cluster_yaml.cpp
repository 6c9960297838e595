#include "node/cluster_yaml.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "units/units.hpp"

namespace het::node {

namespace {

using units::Dimension;

// Three significant digits: what a quick measurement knows (and floor for memory, so that the
// cluster never promises more than the machine has).
double significant3(double v, bool down = false) {
  if (!(v > 0)) return v;
  const double unit = std::pow(10.0, std::floor(std::log10(v)) - 2);
  return (down ? std::floor(v / unit) : std::round(v / unit)) * unit;
}

std::string quantity(double v, Dimension d, bool down = false) { return units::format(significant3(v, down), d); }

std::string percent(double spread) {
  if (!std::isfinite(spread)) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * spread);
  return buf;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 20)) return mib(bytes);
  return bytes >= (1u << 10) ? std::to_string(bytes >> 10) + " KiB" : std::to_string(bytes) + " B";
}

Result<std::string> gpu_cluster(const MachineFacts& f, const DeviceCatalog& catalog) {
  const auto& gpus = f.node.gpus;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (i >= f.gpu_types.size() || f.gpu_types[i].empty())
      return Diagnostic{"", 0, 0, "gpus", "the device catalog has no type for CUDA device " + std::to_string(gpus[i].index) + " (" +
                                              gpus[i].name + "); add it to a catalog (configs/devices.yaml) to describe this machine"};
    if (f.gpu_types[i] != f.gpu_types[0])
      return Diagnostic{"", 0, 0, "gpus", "this machine has GPUs of two types (" + f.gpu_types[0] + ", " + f.gpu_types[i] +
                                              "); a subcluster holds one type: write the cluster by hand (docs/inputs.md)"};
  }
  const std::string& type = f.gpu_types[0];
  const CatalogDevice* entry = catalog.find(type);
  if (!entry) return Diagnostic{"", 0, 0, "gpus", "device type '" + type + "' is not in the device catalog"};
  double memory = gpus[0].memory_bytes;  // the smallest, should they differ
  for (const auto& g : gpus) memory = std::min(memory, g.memory_bytes);
  const std::string name = name_from_hostname(f.node.hostname);
  std::ostringstream out;
  out << "# This machine as a hetplan cluster: written by `hetexec devices --format cluster` (hetexec " << f.version << ")\n"
      << "# at " << f.measured_at << " on host " << f.node.hostname << ": " << gpus.size() << " CUDA GPU"
      << (gpus.size() == 1 ? "" : "s") << ", " << gpus[0].name << " (sm_" << gpus[0].compute_capability << ").\n"
      << "# device: the device catalog's type for it (configs/devices.yaml, the type `hetexec profile\n"
      << "#   --backend cuda` names its profile after, so `hetplan search --profile` matches them); memory:\n"
      << "#   what CUDA reports (" << gib(memory) << "); peak, mem_bandwidth and the intra-node link (the catalog's):\n"
      << "#   " << entry->source << "\n"
      << "# The CPU cores (" << f.node.cpu.cores << ", " << gib(f.node.cpu.memory_bytes) << ") are not offered: plans run on the GPUs.\n"
      << "name: \"" << name << "\"\n"
      << "subclusters:\n"
      << "  - name: \"" << name << "\"\n"
      << "    device: {type: " << type << ", memory: " << quantity(memory, Dimension::bytes, true) << "}\n"
      << "    nodes: 1\n"
      << "    devices_per_node: " << gpus.size() << "\n";
  return out.str();
}

Result<std::string> cpu_cluster(const MachineFacts& f) {
  if (!f.core || !f.loopback)
    return Diagnostic{"", 0, 0, "", "a machine without GPUs is described by its measured cores and loopback link"};
  const CpuInfo& cpu = f.node.cpu;
  const int devices = std::max(1, cpu.cores);
  const CoreRates& core = *f.core;
  const LoopbackLink& link = *f.loopback;
  const std::string name = name_from_hostname(f.node.hostname);
  std::ostringstream out;
  out << "# This machine as a hetplan cluster: written by `hetexec devices --format cluster` (hetexec " << f.version << ")\n"
      << "# at " << f.measured_at << " on host " << f.node.hostname << ": " << cpu.model << ", " << cpu.cores << " online core"
      << (cpu.cores == 1 ? "" : "s") << (cpu.smt ? " (SMT on: pairs of them share a physical core)" : "") << ", "
      << gib(cpu.memory_bytes) << " (MemTotal), no CUDA GPU.\n"
      << "# One device per online core: a rank per core. Profile it as it runs, one thread per rank:\n"
      << "#   hetexec profile --threads 1 --model MODEL.yaml -o cpu.profile.yaml\n"
      << "# (device type `cpu`, as here), then `hetplan search --cluster THIS --profile cpu.profile.yaml`\n"
      << "# costs plans from the profile; without one, from peak (times the cost model's efficiency).\n"
      << "# Measured at that time, each the median of repeated runs (± the 95% interval of the median),\n"
      << "# on a machine that may have been busy (a busy machine measures slower links):\n"
      << "#   memory: MemTotal / " << devices << " devices (installed memory, not what is free).\n"
      << "#   peak: one core's fp32 GEMM rate, " << core.gemm_n << "x" << core.gemm_n << "x" << core.gemm_n
      << " (model::matmul_forward, the CPU backend's Eigen GEMM) on one\n"
      << "#     thread, timed by its CPU time: ±" << percent(core.gemm_flops.spread) << ", " << core.gemm_flops.runs << " runs.\n"
      << "#   mem_bandwidth: one thread's memcpy between two " << mib(core.copy_bytes)
      << " buffers, bytes read + written per second\n"
      << "#     (as STREAM's Copy counts them), timed by its CPU time: ±" << percent(core.copy_bandwidth.spread) << ", "
      << core.copy_bandwidth.runs << " runs.\n"
      << "#   intra_node: hetexec's TCP transport (transport/tcp Peers) between two ranks on 127.0.0.1:\n"
      << "#     latency: half the median round trip of an 8-byte message (±" << percent(link.latency.spread) << ", "
      << link.latency.runs << " round trips);\n"
      << "#     bandwidth: 1 / the slope of the least-squares line through the median one-way times of\n"
      << "#     8 B to " << size_text(link.largest) << " messages (the " << size_text(link.largest) << " median ±"
      << percent(link.bandwidth.spread) << ", " << link.bandwidth.runs << " round trips);\n#     median one-way times:";
  for (std::size_t i = 0; i < link.one_way.size(); ++i)
    out << (i ? "," : "") << " " << size_text(link.one_way[i].first) << " " << quantity(link.one_way[i].second.value, Dimension::time);
  out << ".\n"
      << "name: \"" << name << "\"\n"
      << "subclusters:\n"
      << "  - name: \"" << name << "\"\n"
      << "    device: {type: cpu, memory: " << quantity(cpu.memory_bytes / devices, Dimension::bytes, true)
      << ", peak: " << quantity(core.gemm_flops.value, Dimension::flops)
      << ", mem_bandwidth: " << quantity(core.copy_bandwidth.value, Dimension::bandwidth) << "}\n"
      << "    nodes: 1\n"
      << "    devices_per_node: " << devices << "\n"
      << "    intra_node: {bandwidth: " << quantity(link.bandwidth.value, Dimension::bandwidth)
      << ", latency: " << quantity(link.latency.value, Dimension::time) << "}\n";
  return out.str();
}

}  // namespace

std::string name_from_hostname(const std::string& hostname) {
  std::string name;
  for (char c : hostname) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    name += ok ? c : '-';
  }
  return name.find_first_not_of('-') == std::string::npos ? "host" : name;
}

Result<std::string> cluster_yaml(const MachineFacts& facts, const DeviceCatalog& catalog) {
  return facts.node.gpus.empty() ? cpu_cluster(facts) : gpu_cluster(facts, catalog);
}

}  // namespace het::node
