#pragma once
// One emulated link that several connections share (run-local/agents --emulate-links): a node's
// share of the link between two subclusters, a node's NIC, a device's intra-node link — what
// the cost model loads per node and per device (predict/stage_cost.cpp; docs/inputs.md: a link's
// bandwidth is what one node has for traffic to the other subcluster). A frame occupies the
// link for bytes / bandwidth after the frames any connection sharing it sent before, so two
// ranks of one node sending to the other subcluster at once each get half of it, as the
// planner costs it; the connections of one pair of ranks are no longer each a link of its own.
//
// The link is a word of memory holding when it is next free (the monotonic clock, shared by all
// processes of this machine): in this process (local()), or in POSIX shared memory named after
// the job and the link (open()), for the ranks of one node that are separate processes.
// Reservations are lock-free (compare-and-swap), so any number of threads and processes may
// share one.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "diag/diag.hpp"

namespace het::transport {

class SharedLink {
 public:
  using Clock = std::chrono::steady_clock;

  // A link of this process only.
  static std::shared_ptr<SharedLink> local();
  // The link `name` ("/het-..." as shm_open wants it: one slash, then no other) shared by the
  // processes of this machine that open the same name; made free when first opened. The name
  // is removed when this object goes (the processes that opened it keep sharing it).
  // Errors: shared memory that cannot be opened or mapped (the system's reason).
  static Result<std::shared_ptr<SharedLink>> open(const std::string& name);
  ~SharedLink();
  SharedLink(const SharedLink&) = delete;
  SharedLink& operator=(const SharedLink&) = delete;

  // A frame queued at `queued` occupies the link for `busy` from when it is free (or from
  // `queued`, if later); returns when it has left the link.
  Clock::time_point reserve(Clock::time_point queued, Clock::duration busy);

 private:
  SharedLink(std::atomic<std::int64_t>* free_at, void* mapped, std::string name);
  std::atomic<std::int64_t>* free_at_;  // Clock's ticks since its epoch
  void* mapped_;                        // the shared mapping, or null (free_at_ is owned)
  std::string name_;
};

}  // namespace het::transport
