#pragma once
// Collectives over groups of a job's ranks (DESIGN.md §9): the gradient sync's and tensor
// parallelism's sums. A group runs on NCCL when every member has a CUDA device of its own in
// one subcluster (DiComm, H2 §3.2: device-direct where possible), else on the TCP ring
// collectives of transport/tcp.hpp (CPU-mediated). Buffers are host fp32 — what the runtime's
// sync works on (backend.hpp); the NCCL group stages them through device memory.
//
// Contract of a Group, for both transports:
//  * all_reduce_sum leaves every member with the same sum of data[n].
//  * reduce_scatter_sum leaves data[owned(n)] summed over the members (the rest unspecified);
//    the owned ranges of the members partition [0, n) and depend only on n and the member.
//  * all_gather gives every member each member's data[owned(n)].
//  * Errors are values with a kind (a dead or silent peer: peer_lost; a device error:
//    internal), never a hang.
// NCCL communicators are created collectively; Fabric::group() must therefore be called by all
// members of every group in one global order — the runtime asks in (tag, ranks) order, which
// cannot deadlock (every rank creates its groups in increasing order of the same total order).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"
#include "transport/tcp.hpp"

namespace het::collective {

struct Range {
  std::size_t lo = 0, hi = 0;
};

class Group {
 public:
  virtual ~Group() = default;
  virtual std::string transport() const = 0;  // "tcp" or "nccl"
  virtual Result<Done> all_reduce_sum(float* data, std::size_t n) = 0;
  virtual Result<Done> reduce_scatter_sum(float* data, std::size_t n) = 0;
  virtual Result<Done> all_gather(float* data, std::size_t n) = 0;
  virtual Range owned(std::size_t n) const = 0;

  // The same operations on this rank's device memory, in place and without staging, where the
  // group can (device_memory(): NCCL; a TCP group's caller stages through host memory). The
  // buffer holds padded(n) elements: NCCL's reduce-scatter and all-gather cut it into equal
  // blocks, member i's block i (owned(n) is its part below n).
  enum class Op { all_reduce_sum, reduce_scatter_sum, all_gather };
  virtual bool device_memory() const { return false; }
  virtual std::size_t padded(std::size_t n) const { return n; }
  virtual Result<Done> on_device(Op, float*, std::size_t) {
    return failure(ErrorKind::internal, "a " + transport() + " group takes host memory only");
  }

  // Point-to-point on device memory where the group can (device_memory(); issue 21 step 3:
  // activations between the stages of one subcluster): bf16 elements, peers by member index
  // (their place in the group's rank list). The transfers of one call run together, so two
  // members sending to each other in one call cannot deadlock. With `wait` it returns once they
  // are done; else once they are enqueued (a send that need not block, as a TCP send never
  // does): idle() says whether everything enqueued is done, drain() waits for it (an error
  // value, never a hang, when a peer is dead or silent).
  struct Transfer {
    enum Kind { send, recv } kind = send;
    int peer = 0;
    void* data = nullptr;
    std::size_t count = 0;
  };
  virtual Result<Done> exchange_on_device(const std::vector<Transfer>&, bool /*wait*/) {
    return failure(ErrorKind::internal, "a " + transport() + " group takes host memory only");
  }
  virtual bool idle() { return true; }
  virtual Result<Done> drain() { return Done{}; }
};

// Where a rank computes: its host, its device ("cpu", or "cuda:ORDINAL" followed by
// "@CUDA_VISIBLE_DEVICES" when that is set, so the same text means the same GPU), and the
// plan's subcluster of its stage.
struct Seat {
  std::string host, device, subcluster;
  friend bool operator==(const Seat&, const Seat&) = default;
};
// This process's seat on the cuda device `ordinal` (-1: the CPU).
Seat seat_here(int cuda_ordinal, const std::string& subcluster);

// Publishes this rank's seat under "seat-<rank>" and reads every rank's (within timeout_s).
Result<std::vector<Seat>> exchange_seats(rendezvous::Rendezvous& rendezvous, int rank, int world, const Seat& mine,
                                         double timeout_s);

// The transport of a group of `ranks`, and why, as a sentence for the log.
struct Choice {
  bool nccl = false;
  std::string reason;
};
// NCCL when this build has it, every member sits on a CUDA device, all in one subcluster, and
// no two members share a device (NCCL refuses two ranks on one GPU); else TCP.
Choice choose(const std::vector<int>& ranks, const std::vector<Seat>& seats, bool nccl_built);
// Whether this build has NCCL.
bool nccl_built();

// Makes and keeps the groups of one rank.
class Fabric {
 public:
  // TCP only: every group on the ring collectives over `peers`.
  explicit Fabric(transport::Peers& peers);
  // Groups chosen by choose() over `seats` (one per rank); NCCL groups exchange their ids
  // through `rendezvous` and run on this rank's device `cuda_ordinal`.
  Fabric(transport::Peers& peers, std::vector<Seat> seats, rendezvous::Rendezvous& rendezvous, int cuda_ordinal,
         double timeout_s);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // The group of `ranks` (ring order, containing this rank) carrying `tag`'s traffic; made at
  // the first call and kept (the pointer lives as long as the Fabric).
  Result<Group*> group(const std::vector<int>& ranks, std::uint32_t tag);
  // Whether group(ranks, ...) would run on NCCL (choose() over this fabric's seats).
  bool nccl(const std::vector<int>& ranks) const;
  // How the groups made so far are linked: "nccl: 2 groups; tcp: 1 group (members in
  // different subclusters)", or "no groups".
  std::string summary() const;

 private:
  transport::Peers& peers_;
  std::vector<Seat> seats_;
  rendezvous::Rendezvous* rendezvous_ = nullptr;
  int cuda_ordinal_ = -1;
  double timeout_s_ = 120;
  std::map<std::pair<std::uint32_t, std::vector<int>>, std::unique_ptr<Group>> groups_;
  std::map<std::string, int> tcp_reasons_;  // why groups went to TCP, and how many
};

}  // namespace het::collective
