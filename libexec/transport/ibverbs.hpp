#pragma once
// RDMA between ranks through libibverbs (DESIGN.md §9). The contract:
// - discover() lists this machine's RDMA devices and their ports (state, link layer, LID, GID)
//   as data; with none it says why in `note`, and never fails.
// - choose() decides between RDMA and TCP from a discovery: RDMA on the first device with an
//   active port, else TCP; `reason` is one sentence the caller logs as it is (a node without
//   RDMA hardware logs one line and runs over TCP).
// - detect_peer_memory() says whether GPU memory can be registered (nvidia_peermem loaded, or
//   the kernel's /sys/kernel/mm/memory_peer_target); otherwise only host memory can, and GPU
//   buffers go through host memory.
// - Connection is a reliable-connected (RC) queue pair to one peer rank. Both ranks publish
//   their QpInfo (LID, GID, QP number, first packet sequence number) under the rendezvous key
//   ibv-<from>-<to>.qp and read the peer's, and ibv-<from>-<to>.ready once their queue pair
//   is ready to send; then send()/recv() move one registered buffer,
//   two-sided, and return when the work completed, or an error after timeout_s (a dead peer
//   gives an error value, not a hang; the connection is unusable afterwards).
// Errors are values with sentences; nothing here holds global state.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;

namespace het::transport::ibverbs {

struct Port {
  int number = 0;          // 1-based, as verbs numbers ports
  std::string state;       // "active", "down", "init", "armed", ...
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
  int lid = 0;             // InfiniBand only
  int gid_index = -1;      // the GID used for RoCE / global routing; -1: none valid
  std::string gid;         // that GID as 32 hex digits; empty when none
  int active_mtu = 0;      // bytes
  bool active() const { return state == "active"; }
};

struct Device {
  std::string name, guid;
  std::vector<Port> ports;
};

struct Discovery {
  std::vector<Device> devices;
  std::string note;  // why there are none (empty when some were found)
};

Discovery discover();

struct PeerMemory {
  bool gpu = false;    // GPU memory can be registered
  std::string reason;  // which mechanism was found, or that none was
};
// `root` prefixes /sys and /proc ("" for this machine; tests pass a fake tree).
PeerMemory detect_peer_memory(const std::string& root = "");

struct Choice {
  bool rdma = false;
  std::string device;
  int port = 0, gid_index = -1;
  std::string reason;  // one sentence for the log
};
Choice choose(const Discovery& found);

// What a rank tells its peer to connect a queue pair.
struct QpInfo {
  std::uint16_t lid = 0;
  std::string gid;  // 16 raw bytes (all zero on InfiniBand without global routing)
  std::uint32_t qpn = 0, psn = 0;
  bool operator==(const QpInfo&) const = default;
};
// "lid=<n> gid=<32 hex> qpn=<n> psn=<n>" and back (decode names the first problem).
std::string encode(const QpInfo& info);
Result<QpInfo> decode(const std::string& text);
std::string qp_key(int from, int to);  // "ibv-<from>-<to>.qp"
Result<Done> publish_qp(rendezvous::Rendezvous& rendezvous, int from, int to, const QpInfo& info);
Result<QpInfo> wait_qp(rendezvous::Rendezvous& rendezvous, int from, int to, double timeout_s);

class Connection;

// Memory registered with a connection's protection domain; deregistered when destroyed.
class Region {
 public:
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  friend class Connection;
  Region(ibv_mr* mr, void* data, std::size_t bytes) : mr_(mr), data_(data), bytes_(bytes) {}
  ibv_mr* mr_;
  void* data_;
  std::size_t bytes_;
};

class Connection {
 public:
  // Rank `rank` connects an RC queue pair to rank `peer` on `where` (a choice with rdma set),
  // exchanging QpInfo through the rendezvous within timeout_s.
  static Result<std::unique_ptr<Connection>> connect(const Choice& where, int rank, int peer,
                                                     rendezvous::Rendezvous& rendezvous, double timeout_s);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers [data, data+bytes): host memory, or GPU memory (gpu = true) when
  // detect_peer_memory() allows it (else an error saying so).
  Result<std::unique_ptr<Region>> register_memory(void* data, std::size_t bytes, bool gpu = false);
  // The first `bytes` of `region` to the peer / from the peer (the peer's message must be
  // at most `bytes` long), within the connection's timeout.
  Result<Done> send(const Region& region, std::size_t bytes);
  Result<Done> recv(Region& region, std::size_t bytes);

 private:
  Connection() = default;
  Result<Done> complete(ibv_cq* cq, const char* what);
  int rank_ = 0, peer_ = 0;
  double timeout_s_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  bool broken_ = false;
};

}  // namespace het::transport::ibverbs
