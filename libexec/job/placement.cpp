#include "job/placement.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "runtime/runtime.hpp"

namespace het::job {

Result<NodeId> parse_node_id(const std::string& text) {
  const auto slash = text.rfind('/');
  auto bad = [&] {
    return Diagnostic{"", 0, 0, "node", "expected SUBCLUSTER/INDEX (e.g. a100/0), got '" + text + "'"};
  };
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size()) return bad();
  const std::string index = text.substr(slash + 1);
  if (index.size() > 6 || !std::all_of(index.begin(), index.end(), [](unsigned char c) { return std::isdigit(c); })) return bad();
  return NodeId{text.substr(0, slash), std::stoi(index)};
}

namespace {
// The device each rank runs on: (subcluster, node, device).
template <class F>
void for_each_rank(const Plan& plan, F&& f) {
  const program::Topology topo(plan);
  for (int r = 0; r < topo.ranks(); ++r) f(r, topo.stage_of(r).subcluster, topo.device_of(r));
}
}  // namespace

namespace {
// Upper-case words of letters and digits.
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out(1);
  for (unsigned char c : s) {
    if (std::isalnum(c)) out.back() += char(std::toupper(c));
    else if (!out.back().empty()) out.emplace_back();
  }
  if (out.back().empty()) out.pop_back();
  return out;
}
bool memory_word(const std::string& w) {  // 40GB, 141GB
  return w.size() > 2 && w.compare(w.size() - 2, 2, "GB") == 0 &&
         std::all_of(w.begin(), w.end() - 2, [](unsigned char c) { return std::isdigit(c); });
}
}  // namespace

bool is_model(const std::string& type, const std::string& gpu_name) {
  std::string model;
  for (const auto& w : words(type))
    if (!memory_word(w) && w != "SXM" && w != "PCIE" && w != "NVL") model += w;
  if (model.empty()) return false;
  const auto name = words(gpu_name);
  for (std::size_t i = 0; i < name.size(); ++i) {
    std::string run;
    for (std::size_t j = i; j < name.size() && run.size() < model.size(); ++j) {
      run += name[j];
      if (run == model) return true;
    }
  }
  return false;
}

std::string catalog_type(const std::string& gpu_name, double memory_bytes, const DeviceCatalog& catalog) {
  std::string best;
  double best_gap = 0;
  for (const auto& entry : catalog.devices) {
    const DeviceSpec& d = entry.device;
    if (!is_model(d.type, gpu_name)) continue;
    const double gap = std::abs(d.memory - memory_bytes);
    if (best.empty() || gap < best_gap) best = d.type, best_gap = gap;
  }
  return best;
}

std::vector<RankOnNode> ranks_on(const Plan& plan, const NodeId& node) {
  std::vector<RankOnNode> out;
  for_each_rank(plan, [&](int r, const std::string& sub, const DeviceRef& d) {
    if (sub == node.subcluster && d.node == node.index) out.push_back({r, d.device});
  });
  return out;
}

std::vector<NodeId> nodes_of(const Plan& plan) {
  std::set<NodeId> nodes;
  for_each_rank(plan, [&](int, const std::string& sub, const DeviceRef& d) { nodes.insert({sub, d.node}); });
  return {nodes.begin(), nodes.end()};
}

std::vector<std::string> check_offer(const Plan& plan, const NodeId& node, const Offer& offer) {
  std::vector<std::string> problems;
  const std::string where = node.to_string() + ": ";
  const SubclusterSpec* sub = plan.cluster.find(node.subcluster);
  if (!sub) return {where + "the plan's cluster has no subcluster '" + node.subcluster + "'"};
  const auto ranks = ranks_on(plan, node);
  if (ranks.empty()) return {where + "the plan runs nothing on this node"};
  int highest = 0;
  for (const auto& r : ranks) highest = std::max(highest, r.device);
  if (highest >= int(offer.devices.size()))
    problems.push_back(where + "the plan uses device " + std::to_string(highest) + ", the agent has " +
                       std::to_string(offer.devices.size()) + " " + offer.kind + " device" + (offer.devices.size() == 1 ? "" : "s"));
  if (offer.kind == "cpu") return problems;  // CPU workers emulate the plan's device type
  if (offer.kind != "cuda") return {where + "unknown device kind '" + offer.kind + "'"};
  // A GPU must be the plan's type (its model, e.g. A100 of A100-40GB) with its memory.
  const std::string type = sub->device.type;
  for (const auto& r : ranks) {
    if (r.device >= int(offer.devices.size())) continue;
    const auto& d = offer.devices[std::size_t(r.device)];
    if (!is_model(type, d.name))
      problems.push_back(where + "device " + std::to_string(r.device) + " is a " + d.name + ", the plan expects a " + type);
    else if (d.memory < 0.9 * sub->device.memory)
      problems.push_back(where + "device " + std::to_string(r.device) + " has " + std::to_string(int(d.memory / (1 << 30))) +
                         " GiB, the plan's " + type + " has " + std::to_string(int(sub->device.memory / (1 << 30))) + " GiB");
  }
  return problems;
}

}  // namespace het::job
