#pragma once
// Re-planning when devices are lost or the cluster changes (`hetplan replan`, issue 19), and
// what switching from the old plan to the new one moves.
//
// without(): the cluster less some nodes or devices. A subcluster losing whole nodes keeps the
// others (renumbered in order); a node losing some of its devices leaves the rest as a
// subcluster of its own, "<sub>-n<node>", one node of the devices left (a subcluster's nodes
// all have devices_per_node devices), linked to its parent and to the parent's partial nodes by
// the parent's inter-node link and to every other subcluster as the parent is. A subcluster
// left without devices is dropped.
//
// switch_between(): the switch as Hetu v2 plans it (§4.3, §6: one fused batched send/receive,
// load-balanced, fast links first). Every rank of the new plan needs its parameters
// (program/shards.hpp) with their AdamW moments: 4 bytes of fp32 value and 8 of moments per
// element. What its device held under the old plan stays; each other part comes from a
// surviving holder, the one over the fastest link, among those the least loaded so far; a part
// no survivor holds comes from the last checkpoint. Predicted time: every device sends and
// receives its messages at once, each at its link's bandwidth and serialised on the device's
// port; the switch takes the longest device's sum over its messages of latency + bytes ÷
// bandwidth, sending or receiving. Reading the checkpoint is not in it (a disk's rate is not in
// the cluster).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/diag.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"

namespace het::replan {

// A device: (subcluster, node, device) as a plan's stages name them.
struct Device {
  std::string subcluster;
  int node = 0, device = 0;
  friend bool operator==(const Device&, const Device&) = default;
  friend auto operator<=>(const Device&, const Device&) = default;
};
std::string to_string(const Device& d);  // "sub/node:device"

// The new cluster and, per device of it, the old cluster's device it is (absent: a device the
// old cluster did not have).
struct Reduced {
  ClusterSpec cluster;
  std::vector<std::pair<Device, std::optional<Device>>> old_of;
};

// `removals`: "SUB/NODE" (a whole node) or "SUB/NODE:DEVICE". Errors (naming the argument): an
// unknown subcluster, a node or device out of range, nothing left.
Result<Reduced> without(const ClusterSpec& cluster, const std::vector<std::string>& removals);
// The new cluster's devices as the old one's where both have a subcluster of that name and
// device type with that node and device.
Reduced matched(const ClusterSpec& old_cluster, const ClusterSpec& new_cluster);

enum class Route { in_place, intra_node, inter_node, inter_subcluster, checkpoint };
const char* to_string(Route c);

struct Transfer {
  std::optional<Device> from;  // absent: from the checkpoint
  Device to;                   // in the new cluster
  Route route = Route::checkpoint;
  std::int64_t bytes = 0;
};

struct Switch {
  std::vector<Transfer> transfers;       // one per (from, to) pair, summed
  std::int64_t bytes_by_route[5] = {};   // by Route; in_place: what stayed in place
  double predicted_s = 0;                // the fused send/receive, checkpoint reads left out
  std::int64_t received(const Device& d) const;
};

// Errors: plans whose model differs or uses ZeRO (the moments' owners are the runtime's
// gradient buckets, not yet in the planner: unsupported), or sublayer granularity (not run by
// the executor: unsupported). `reduced`: the new plan's cluster and its devices' old names.
Result<Switch> switch_between(const Plan& old_plan, const Plan& new_plan, const Reduced& reduced);

nlohmann::ordered_json to_json(const Switch& s);
std::string table(const Switch& s);

}  // namespace het::replan
