#pragma once
// The cluster (cluster.yaml; schema in docs/inputs.md, DESIGN.md §4): subclusters of one
// device type each, their intra-/inter-node links, and the links between subclusters.
//
// read_cluster() resolves catalog device names (a map form may override catalog fields),
// and checks: unique subcluster names, links whose endpoints exist, no link given twice, a
// link for every pair of subclusters unless `default_link` is given, inter_node links for
// subclusters of more than one node.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diag/diag.hpp"
#include "spec/catalog.hpp"

namespace het {

struct SubclusterSpec {
  std::string name;
  DeviceSpec device;
  int nodes = 0;
  int devices_per_node = 0;
  LinkSpec intra_node;                 // per device
  std::optional<LinkSpec> inter_node;  // per node NIC; absent only when nodes == 1
  int num_devices() const { return nodes * devices_per_node; }
};

struct SubclusterLink {
  std::string a, b;  // subcluster names, a != b
  LinkSpec link;
};

struct ClusterSpec {
  std::string name;
  std::vector<SubclusterSpec> subclusters;
  std::vector<SubclusterLink> links;
  std::optional<LinkSpec> default_link;

  // nullptr when absent.
  const SubclusterSpec* find(const std::string& subcluster) const;
  // Index into subclusters, -1 when absent.
  int index_of(const std::string& subcluster) const;
  // The link between two different subclusters: the listed one, else default_link.
  // Precondition: the cluster validated (so one of them exists).
  LinkSpec link_between(const std::string& a, const std::string& b) const;
  int num_devices() const;
};

Result<ClusterSpec> read_cluster(const std::string& file, const YAML::Node& node, const std::string& path,
                                 const DeviceCatalog& catalog);
Result<ClusterSpec> load_cluster(const std::string& file, const DeviceCatalog& catalog);

// The resolved spec (devices spelled out) in the cluster schema; read_cluster() reads it back.
nlohmann::ordered_json to_json(const ClusterSpec& cluster);

}  // namespace het
