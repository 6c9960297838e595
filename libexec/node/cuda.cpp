// Build with CUDA: GPUs through the CUDA runtime; NCCL's version when NCCL is linked.
#include <cuda_runtime_api.h>
#ifdef HET_HAVE_NCCL
#include <nccl.h>
#endif

#include "node/node.hpp"

namespace het::node {

namespace {
std::string version_text(int v) {  // CUDA encodes 13.0 as 13000
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

void discover_gpus(NodeInfo& node) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    node.notes.push_back(std::string("no CUDA GPU usable: ") + cudaGetErrorString(err));
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      node.notes.push_back("cannot query CUDA device " + std::to_string(i));
      continue;
    }
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, i);
    node.gpus.push_back({i, prop.name, static_cast<double>(prop.totalGlobalMem), prop.major * 10 + prop.minor, bus});
  }
}

void describe_cuda(BuildInfo& b) {
  b.cuda = true;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) b.cuda_runtime = version_text(v);
#ifdef HET_CUDA_EMULATION
  b.cuda_runtime += ", EMULATED on CPU threads";
#endif
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) b.cuda_driver = version_text(v);
#ifdef HET_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    b.nccl = true;
    b.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string((nccl / 100) % 100) + "." +
                     std::to_string(nccl % 100);
#ifdef HET_CUDA_EMULATION
    b.nccl_version += ", EMULATED over loopback TCP";
#endif
  }
#endif
}

}  // namespace het::node
