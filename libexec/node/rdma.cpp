// RDMA devices through libibverbs. A node without RDMA hardware lists none.
#include <infiniband/verbs.h>

#include <cstdio>

#include "node/node.hpp"

namespace het::node {

void discover_rdma(NodeInfo& node) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    node.notes.push_back("no RDMA devices (libibverbs found none); cross-node traffic uses TCP");
    return;
  }
  for (int i = 0; i < count; ++i) {
    RdmaInfo info;
    info.name = ibv_get_device_name(list[i]);
    char guid[32];
    std::snprintf(guid, sizeof guid, "%016llx", static_cast<unsigned long long>(ibv_get_device_guid(list[i])));
    info.guid = guid;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0) info.ports = attr.phys_port_cnt;
      ibv_close_device(ctx);
    }
    node.rdma.push_back(std::move(info));
  }
  if (count == 0) node.notes.push_back("no RDMA devices (libibverbs found none); cross-node traffic uses TCP");
  ibv_free_device_list(list);
}

}  // namespace het::node
