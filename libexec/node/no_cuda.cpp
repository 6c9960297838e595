// Build without CUDA (HET_CUDA=OFF or no nvcc): no GPUs can be used.
#include "node/node.hpp"

namespace het::node {

void discover_gpus(NodeInfo& node) { node.notes.push_back("this build has no CUDA support (built with HET_CUDA=OFF or without nvcc)"); }

void describe_cuda(BuildInfo&) {}

}  // namespace het::node
