// RDMA devices, as the ibverbs transport discovers them. A node without RDMA hardware lists none.
#include "node/node.hpp"
#include "transport/ibverbs.hpp"

namespace het::node {

void discover_rdma(NodeInfo& node) {
  const auto found = transport::ibverbs::discover();
  for (const auto& d : found.devices) node.rdma.push_back({d.name, static_cast<int>(d.ports.size()), d.guid});
  if (found.devices.empty()) node.notes.push_back(found.note + "; cross-node traffic uses TCP");
}

}  // namespace het::node
