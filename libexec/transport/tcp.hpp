#pragma once
// TCP between the ranks of a job (DESIGN.md §9): one connection per pair of ranks, framed
// messages [magic, tag, length, CRC-32] + payload. Sends are queued and written by one sender
// thread per peer, so a rank never blocks on a send (rings and pipelines cannot deadlock on
// full socket buffers); frames are read ahead by one reader thread per peer as they arrive, so
// a transfer proceeds while both ranks compute. A receive takes the next frame from the peer,
// waiting at most the timeout for it, and reports a closed peer (after its last frames), a
// timeout, a tag out of order or a corrupt payload as an error value with its kind: a peer
// that closed, reset or stayed silent is ErrorKind::peer_lost (the consequence of another
// rank's failure); a frame out of order or corrupt is ErrorKind::internal.
// Link emulation: a connection can be shaped to a bandwidth and latency (a token bucket: a
// frame leaves when the link has carried the previous ones, and arrives `latency` later), so
// a heterogeneous cluster's slow links can be reproduced on one machine. The sender writes a
// shaped frame at once, stamped with when the emulated link delivers it; a receiver on the same
// machine (both ends of the connection on one IPv4 address: one steady clock) delivers it then
// or, if the machine's own transport took longer, as soon as it has it; one on another machine
// holds it as long after reading it as the sender wrote it before it was due (the emulated link
// and the real network in series). So the threads waking to send and to receive a frame (late
// by up to hundreds of microseconds on a VM whose cores idle: docs/executor.md, 2026-11-29) do
// so within the emulated time instead of after it.
// Rendezvous: each rank listens on an ephemeral port and publishes "host:port" under the key
// rank-<r>.endpoint of the job's rendezvous (a directory: the file DIR/rank-<r>.endpoint; or a
// gRPC rendezvous service); ranks connect to lower ranks and accept higher ones.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"
#include "transport/shared_link.hpp"

namespace het::transport {

std::uint32_t crc32(const void* data, std::size_t n);

class Peers {
 public:
  // Connects rank `rank` of `world` with all others through the job's rendezvous, within
  // timeout_s seconds. The rank listens on IPv4 address `host` (an address of this machine
  // the other ranks can reach) and publishes "host:port".
  static Result<std::unique_ptr<Peers>> connect(int rank, int world, rendezvous::Rendezvous& rendezvous, double timeout_s,
                                                const std::string& host = "127.0.0.1");
  ~Peers();
  Peers(const Peers&) = delete;
  Peers& operator=(const Peers&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Queues a message (copied); returns at once.
  void send(int peer, std::uint32_t tag, const void* data, std::size_t bytes);
  // Receives the next message from `peer`, which must carry `tag` and `bytes` bytes.
  Result<Done> recv(int peer, std::uint32_t tag, void* data, std::size_t bytes);
  // Waits until every queued message is written (or the first write error).
  Result<Done> flush();
  // Shapes the connection to `peer` (bytes per second, seconds); bandwidth 0: unshaped. With
  // `shared`, its frames take turns on that link with the other connections shaped by it
  // (shared_link.hpp); else the connection is a link of its own.
  void shape(int peer, double bandwidth, double latency, std::shared_ptr<SharedLink> shared = nullptr);

  // Payload bytes this rank has sent (queued) and received so far under one tag, over all
  // peers: what the runtime's byte counts are checked with against the rank program.
  struct Count {
    std::uint64_t sent = 0, received = 0;
  };
  Count count(std::uint32_t tag) const;

 private:
  Peers(int rank, int world, std::vector<int> fds, double timeout_s);
  struct Link;
  void sender_loop(Link& link);
  static void reader_loop(Link& link);

  int rank_, world_;
  double timeout_s_;
  mutable std::mutex count_mutex_;
  std::map<std::uint32_t, Count> counts_;  // by tag
  std::vector<std::unique_ptr<Link>> links_;  // by peer; null for this rank
};

// Collectives over `group` (ranks in ring order, containing this rank), on n elements in
// place. The buffer is cut into |group| chunks; chunk c is [n·c/p, n·(c+1)/p).
// Ring reduce-scatter: afterwards member i holds the sum of chunk (i+1) mod p (the others are
// partial sums). Ring all-gather: member i contributes chunk (i+1) mod p; afterwards all hold
// every chunk. All-reduce = reduce-scatter + all-gather; every member ends with the same bits.
template <class T>
Result<Done> reduce_scatter_sum(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag);
template <class T>
Result<Done> all_gather(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag);
template <class T>
Result<Done> all_reduce_sum(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag);
// The root's n elements to every member, along the ring.
template <class T>
Result<Done> broadcast(Peers& peers, const std::vector<int>& group, int root, T* data, std::size_t n, std::uint32_t tag);
// Member i's chunk index after reduce_scatter_sum (the chunk it owns in full).
int owned_chunk(const std::vector<int>& group, int rank);

}  // namespace het::transport
