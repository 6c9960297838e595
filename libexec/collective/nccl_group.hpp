#pragma once
// A collective::Group on an NCCL communicator (built only with NCCL): host buffers staged
// through one device buffer on a stream of its own. Reduce-scatter and all-gather cut n into
// |group| blocks of ceil(n/|group|) (NCCL needs equal blocks; the padding past n is never read
// back), member i owning block i, and run in place.
#include <memory>
#include <string>
#include <vector>

#include "collective/collective.hpp"

namespace het::collective {

Result<std::unique_ptr<Group>> make_nccl_group(const std::string& name, const std::vector<int>& ranks, int rank, int cuda_ordinal,
                                               rendezvous::Rendezvous& rendezvous, double timeout_s);

}  // namespace het::collective
