#include "transport/ibverbs.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <filesystem>
#include <thread>

#include "transport/hex.hpp"

namespace het::transport::ibverbs {

namespace {

Diagnostic problem(std::string what) { return Diagnostic{"", 0, 0, "", std::move(what)}; }
std::string errno_text() { return std::strerror(errno); }

std::string state_name(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    case IBV_PORT_ACTIVE_DEFER: return "active-defer";
    default: return "nop";
  }
}

int mtu_bytes(ibv_mtu mtu) { return 128 << static_cast<int>(mtu); }  // IBV_MTU_256 = 1

bool zero(const ibv_gid& gid) {
  for (unsigned char b : gid.raw)
    if (b != 0) return false;
  return true;
}
bool ipv4_mapped(const ibv_gid& gid) {  // ::ffff:a.b.c.d, what RoCE v2 over IPv4 uses
  for (int i = 0; i < 10; ++i)
    if (gid.raw[i] != 0) return false;
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

Port query_port(ibv_context* ctx, int number) {
  Port port;
  port.number = number;
  ibv_port_attr attr{};
  if (ibv_query_port(ctx, static_cast<std::uint8_t>(number), &attr) != 0) {
    port.state = "unknown (" + errno_text() + ")";
    return port;
  }
  port.state = state_name(attr.state);
  port.link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  port.lid = attr.lid;
  port.active_mtu = mtu_bytes(attr.active_mtu);
  // The GID: on RoCE prefer an IPv4-mapped one, else the first valid one.
  for (int i = 0; i < attr.gid_tbl_len && i < 64; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, static_cast<std::uint8_t>(number), i, &gid) != 0 || zero(gid)) continue;
    if (port.gid_index < 0 || (attr.link_layer == IBV_LINK_LAYER_ETHERNET && ipv4_mapped(gid))) {
      port.gid_index = i;
      port.gid = to_hex(gid.raw, sizeof gid.raw);
      if (attr.link_layer != IBV_LINK_LAYER_ETHERNET || ipv4_mapped(gid)) break;
    }
  }
  return port;
}

template <class TimePoint>
double seconds_left(TimePoint deadline) {
  return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
}

}  // namespace

Discovery discover() {
  Discovery found;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    found.note = "no RDMA devices: libibverbs could not list them (" + errno_text() +
                 "; no RDMA kernel support on this machine)";
    return found;
  }
  for (int i = 0; i < count; ++i) {
    Device device;
    device.name = ibv_get_device_name(list[i]);
    char guid[32];
    std::snprintf(guid, sizeof guid, "%016llx", static_cast<unsigned long long>(ibv_get_device_guid(list[i])));
    device.guid = guid;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0)
        for (int p = 1; p <= attr.phys_port_cnt; ++p) device.ports.push_back(query_port(ctx, p));
      ibv_close_device(ctx);
    }
    found.devices.push_back(std::move(device));
  }
  ibv_free_device_list(list);
  if (found.devices.empty())
    found.note = "no RDMA devices: libibverbs found none (no InfiniBand/RoCE adapter, or its kernel driver is not loaded)";
  return found;
}

PeerMemory detect_peer_memory(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(root + "/sys/kernel/mm/memory_peer_target", ec))
    return {true, "GPU memory can be registered: the kernel's peer-memory interface (/sys/kernel/mm/memory_peer_target) is present"};
  std::ifstream modules(root + "/proc/modules");
  for (std::string line; std::getline(modules, line);)
    if (line.rfind("nvidia_peermem ", 0) == 0)
      return {true, "GPU memory can be registered: the nvidia_peermem module is loaded"};
  return {false,
          "GPU memory cannot be registered for RDMA (nvidia_peermem is not loaded and "
          "/sys/kernel/mm/memory_peer_target is absent); GPU buffers go through host memory"};
}

Choice choose(const Discovery& found) {
  Choice choice;
  for (const Device& device : found.devices)
    for (const Port& port : device.ports)
      if (port.active()) {
        choice.rdma = true;
        choice.device = device.name;
        choice.port = port.number;
        choice.gid_index = port.gid_index;
        choice.reason = "RDMA on " + device.name + " port " + std::to_string(port.number) + " (" + port.link_layer +
                        (port.gid_index >= 0 ? ", GID index " + std::to_string(port.gid_index) : std::string()) + ")";
        return choice;
      }
  if (found.devices.empty()) {
    choice.reason = (found.note.empty() ? std::string("no RDMA devices") : found.note) + "; falling back to TCP";
  } else {
    std::string names;
    for (const Device& device : found.devices) names += (names.empty() ? "" : ", ") + device.name;
    choice.reason = "no active RDMA port on " + names + "; falling back to TCP";
  }
  return choice;
}

std::string encode(const QpInfo& info) {
  return "lid=" + std::to_string(info.lid) + " gid=" + to_hex(info.gid.data(), info.gid.size()) +
         " qpn=" + std::to_string(info.qpn) + " psn=" + std::to_string(info.psn);
}

Result<QpInfo> decode(const std::string& text) {
  std::istringstream in(text);
  QpInfo info;
  bool seen[4] = {false, false, false, false};
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    const std::string name = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    auto number = [&](unsigned long long max, auto& out) -> bool {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 10) return false;
      const unsigned long long v = std::stoull(value);
      if (v > max) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return true;
    };
    bool good = true;
    if (name == "lid") good = number(0xffff, info.lid), seen[0] = true;
    else if (name == "gid") {
      auto raw = from_hex(value);
      good = raw && raw->size() == 16;
      if (good) info.gid = *raw;
      seen[1] = true;
    } else if (name == "qpn") good = number(0xffffff, info.qpn), seen[2] = true;
    else if (name == "psn") good = number(0xffffff, info.psn), seen[3] = true;
    else return problem("queue-pair info has an unknown field '" + name + "' in '" + text + "'");
    if (!good) return problem("queue-pair info has a bad " + name + " '" + value + "' in '" + text + "'");
  }
  const char* names[4] = {"lid", "gid", "qpn", "psn"};
  for (int i = 0; i < 4; ++i)
    if (!seen[i]) return problem(std::string("queue-pair info lacks ") + names[i] + " in '" + text + "'");
  return info;
}

std::string qp_key(int from, int to) { return "ibv-" + std::to_string(from) + "-" + std::to_string(to) + ".qp"; }

Result<Done> publish_qp(rendezvous::Rendezvous& rendezvous, int from, int to, const QpInfo& info) {
  return rendezvous.publish(qp_key(from, to), encode(info));
}

Result<QpInfo> wait_qp(rendezvous::Rendezvous& rendezvous, int from, int to, double timeout_s) {
  auto text = rendezvous.wait(qp_key(from, to), timeout_s);
  if (!text) return text.errors();
  auto info = decode(*text);
  if (!info) return problem("rank " + std::to_string(from) + "'s " + info.errors().front().message);
  return info;
}

Region::~Region() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

Connection::~Connection() {
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  if (send_cq_ != nullptr) ibv_destroy_cq(send_cq_);
  if (recv_cq_ != nullptr) ibv_destroy_cq(recv_cq_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Result<std::unique_ptr<Connection>> Connection::connect(const Choice& where, int rank, int peer,
                                                       rendezvous::Rendezvous& rendezvous, double timeout_s) {
  const std::string who = "rank " + std::to_string(rank) + " to rank " + std::to_string(peer) + ": ";
  if (!where.rdma) return problem(who + "no RDMA device was chosen (" + where.reason + ")");
  std::unique_ptr<Connection> c(new Connection);
  c->rank_ = rank;
  c->peer_ = peer;
  c->timeout_s_ = timeout_s;

  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  for (int i = 0; list != nullptr && i < count && c->ctx_ == nullptr; ++i)
    if (where.device == ibv_get_device_name(list[i])) c->ctx_ = ibv_open_device(list[i]);
  if (list != nullptr) ibv_free_device_list(list);
  if (c->ctx_ == nullptr) return problem(who + "cannot open RDMA device " + where.device);
  if (!(c->pd_ = ibv_alloc_pd(c->ctx_))) return problem(who + "cannot allocate a protection domain: " + errno_text());
  c->send_cq_ = ibv_create_cq(c->ctx_, 16, nullptr, nullptr, 0);
  c->recv_cq_ = ibv_create_cq(c->ctx_, 16, nullptr, nullptr, 0);
  if (!c->send_cq_ || !c->recv_cq_) return problem(who + "cannot create completion queues: " + errno_text());
  ibv_qp_init_attr init{};
  init.send_cq = c->send_cq_;
  init.recv_cq = c->recv_cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  if (!(c->qp_ = ibv_create_qp(c->pd_, &init))) return problem(who + "cannot create a queue pair: " + errno_text());

  const auto port = static_cast<std::uint8_t>(where.port);
  ibv_port_attr port_attr{};
  if (ibv_query_port(c->ctx_, port, &port_attr) != 0) return problem(who + "cannot query port: " + errno_text());

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(c->qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    return problem(who + "cannot move the queue pair to INIT: " + errno_text());

  QpInfo mine;
  mine.lid = port_attr.lid;
  mine.gid.assign(16, '\0');
  if (where.gid_index >= 0) {
    ibv_gid gid{};
    if (ibv_query_gid(c->ctx_, port, where.gid_index, &gid) == 0) mine.gid.assign(reinterpret_cast<char*>(gid.raw), 16);
  }
  mine.qpn = c->qp_->qp_num;
  mine.psn = std::random_device{}() & 0xffffff;
  if (auto done = publish_qp(rendezvous, rank, peer, mine); !done) return done.errors();
  auto theirs = wait_qp(rendezvous, peer, rank, timeout_s);
  if (!theirs) return problem(who + "no queue-pair info from the peer: " + theirs.errors().front().message);

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = port_attr.active_mtu;
  attr.dest_qp_num = theirs->qpn;
  attr.rq_psn = theirs->psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = theirs->lid;
  attr.ah_attr.port_num = port;
  if (where.gid_index >= 0 && theirs->gid != std::string(16, '\0')) {  // RoCE, or InfiniBand across subnets
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, theirs->gid.data(), 16);
    attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(where.gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(c->qp_, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return problem(who + "cannot move the queue pair to RTR (ready to receive): " + errno_text());
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;   // 4.096 us * 2^14 = 67 ms per transport retry
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;  // a send waits (retrying) until the peer posts its receive
  attr.sq_psn = mine.psn;
  attr.max_rd_atomic = 1;
  if (ibv_modify_qp(c->qp_, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return problem(who + "cannot move the queue pair to RTS (ready to send): " + errno_text());
  // Both sides ready before either sends: a send to a queue pair not yet in RTR is dropped.
  const std::string ready = "ibv-" + std::to_string(rank) + "-" + std::to_string(peer) + ".ready";
  if (auto done = rendezvous.publish(ready, "1"); !done) return done.errors();
  auto other = rendezvous.wait("ibv-" + std::to_string(peer) + "-" + std::to_string(rank) + ".ready", timeout_s);
  if (!other) return problem(who + "the peer's queue pair did not become ready: " + other.errors().front().message);
  return c;
}

Result<std::unique_ptr<Region>> Connection::register_memory(void* data, std::size_t bytes, bool gpu) {
  if (gpu) {
    const PeerMemory peer_memory = detect_peer_memory();
    if (!peer_memory.gpu) return problem(peer_memory.reason);
  }
  ibv_mr* mr = ibv_reg_mr(pd_, data, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr)
    return problem("cannot register " + std::to_string(bytes) + " bytes of " + (gpu ? "GPU" : "host") +
                   " memory for RDMA: " + errno_text());
  return std::unique_ptr<Region>(new Region(mr, data, bytes));
}

Result<Done> Connection::complete(ibv_cq* cq, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  const std::string who = std::string("RDMA ") + what + " between rank " + std::to_string(rank_) + " and rank " +
                          std::to_string(peer_);
  for (;;) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return broken_ = true, problem(who + ": polling the completion queue failed");
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        return broken_ = true, problem(who + " failed: " + ibv_wc_status_str(wc.status) + " (is the peer alive?)");
      return Done{};
    }
    if (seconds_left(deadline) <= 0) {
      broken_ = true;
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_s_);
      return problem(who + " did not complete within " + limit + " s (is the peer alive?)");
    }
    std::this_thread::yield();
  }
}

Result<Done> Connection::send(const Region& region, std::size_t bytes) {
  if (broken_) return problem("the RDMA connection to rank " + std::to_string(peer_) + " failed earlier");
  if (bytes > region.bytes()) return problem("RDMA send of " + std::to_string(bytes) + " bytes from a smaller region");
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(region.data()), static_cast<std::uint32_t>(bytes), region.mr_->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(qp_, &wr, &bad) != 0) return problem("cannot post an RDMA send: " + errno_text());
  return complete(send_cq_, "send");
}

Result<Done> Connection::recv(Region& region, std::size_t bytes) {
  if (broken_) return problem("the RDMA connection to rank " + std::to_string(peer_) + " failed earlier");
  if (bytes > region.bytes()) return problem("RDMA receive of " + std::to_string(bytes) + " bytes into a smaller region");
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(region.data()), static_cast<std::uint32_t>(bytes), region.mr_->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(qp_, &wr, &bad) != 0) return problem("cannot post an RDMA receive: " + errno_text());
  return complete(recv_cq_, "receive");
}

}  // namespace het::transport::ibverbs
