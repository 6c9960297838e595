#pragma once
// HexiScale's graph partitioning (§4.2 phase 1; §4.3 step (i) is the same on a part): the
// cluster's nodes as a graph — vertex weight = the node's compute (devices × peak), edge weight
// = the bandwidth between two nodes (a subcluster's inter-node link, or the link between
// subclusters) — cut by METIS into k parts of balanced compute (multilevel: heavy-edge
// matching, initial partition, Kernighan–Lin refinement), with the least bandwidth between
// parts (min-cut: the data-parallel sync gets the slow links, the pipelines the fast ones) or,
// with max_cut, the most (edge weights inverted: the fast links go to the data-parallel sync;
// §4.4). The paper's vertices are GPUs; a node's GPUs are joined by its intra-node link, the
// heaviest edge there is, which heavy-edge matching merges first — so nodes are the vertices
// here, which also keeps 10,000-GPU clusters small graphs.
#include <vector>

#include "diag/diag.hpp"
#include "spec/cluster.hpp"

namespace het::search {

struct NodeRef {
  int sub = 0;   // index into cluster.subclusters
  int node = 0;  // node index within it
  friend bool operator==(const NodeRef&, const NodeRef&) = default;
};

struct Partition {
  std::vector<std::vector<NodeRef>> parts;  // k non-empty parts, nodes in cluster order
  double cut_bandwidth = 0;                 // Σ bandwidth of the edges between parts (B/s)
  double imbalance = 1;                     // max part compute / mean part compute (>= 1)
};

// Every node of the cluster, in cluster order.
std::vector<NodeRef> all_nodes(const ClusterSpec& cluster);

// Cuts `nodes` into k parts (1 <= k <= |nodes|). max_imbalance bounds the compute balance
// METIS aims for (HexiScale's balance hyperparameter); seed makes it repeatable. Errors: k out
// of range, or METIS failing.
Result<Partition> partition_nodes(const ClusterSpec& cluster, const std::vector<NodeRef>& nodes, int k, bool max_cut,
                                  double max_imbalance = 1.05, int seed = 1);

}  // namespace het::search
