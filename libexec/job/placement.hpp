#pragma once
// Where a plan's ranks run (DESIGN.md §9): a node is (subcluster, node index) — an agent's
// `--node SUBCLUSTER/INDEX` — and each rank runs on one device of one node: device
// stage.devices[(replica·cp + member)·tp + shard] (runtime/runtime.hpp orders the ranks).
// Before a job starts, every node's offer (what its agent has) is checked against what the
// plan puts there: enough devices, and for GPUs the plan's device type and memory. CPU
// devices run any subcluster (the CPU backend emulates the plan's device types).
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "plan/plan.hpp"
#include "spec/catalog.hpp"

namespace het::job {

struct NodeId {
  std::string subcluster;
  int index = 0;
  std::string to_string() const { return subcluster + "/" + std::to_string(index); }
  friend auto operator<=>(const NodeId&, const NodeId&) = default;
};
// "SUBCLUSTER/INDEX"; errors say what the form is.
Result<NodeId> parse_node_id(const std::string& text);

struct RankOnNode {
  int rank = 0;
  int device = 0;  // index of the device within the node
};
// The plan's ranks on `node`, in rank order.
std::vector<RankOnNode> ranks_on(const Plan& plan, const NodeId& node);
// Every node the plan uses, sorted.
std::vector<NodeId> nodes_of(const Plan& plan);

// What a node's agent offers.
struct Offer {
  std::string kind;  // "cpu" or "cuda"
  struct Device {
    std::string name;     // "NVIDIA A100-SXM4-40GB", "cpu"
    double memory = 0;    // bytes
  };
  std::vector<Device> devices;
};
// Whether a GPU named `gpu_name` (as CUDA names it: "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX
// 3080 Ti") is of the model of device type `type` (as the catalog and clusters name it:
// "A100-40GB", "RTX-3080Ti"): the type without its memory and form-factor words (A100, RTX3080TI)
// must be whole consecutive words of the name, so H20 is not an H200 nor H200 a GH200. Memory is
// not compared.
bool is_model(const std::string& type, const std::string& gpu_name);
// The catalog's device type of a GPU: of the types is_model() accepts, the one whose memory is
// nearest `memory_bytes`; empty when none (a GPU the catalog does not know).
std::string catalog_type(const std::string& gpu_name, double memory_bytes, const DeviceCatalog& catalog);

// Empty when `offer` can run the plan's ranks on `node`; else one sentence per problem, e.g.
// "a100/0: the plan uses device 3, the agent has 2 cpu devices".
std::vector<std::string> check_offer(const Plan& plan, const NodeId& node, const Offer& offer);

}  // namespace het::job
