#include "replan/replan.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "program/program.hpp"
#include "program/shards.hpp"

namespace het::replan {

namespace {

constexpr std::int64_t kBytesPerElement = 4 + 8;  // fp32 value, AdamW's two fp32 moments

Diagnostic bad(const std::string& arg, const std::string& message) { return Diagnostic{"", 0, 0, "--without " + arg, message}; }

// "SUB/NODE[:DEVICE]".
struct Removal {
  std::string subcluster;
  int node = 0;
  std::optional<int> device;
};
Result<Removal> parse(const std::string& text, const ClusterSpec& c) {
  const auto slash = text.rfind('/');
  if (slash == std::string::npos || slash == 0) return bad(text, "expected SUB/NODE or SUB/NODE:DEVICE");
  Removal r;
  r.subcluster = text.substr(0, slash);
  const SubclusterSpec* sub = c.find(r.subcluster);
  if (!sub) return bad(text, "no subcluster '" + r.subcluster + "' in the plan's cluster");
  const std::string rest = text.substr(slash + 1);
  const auto colon = rest.find(':');
  auto number = [&](const std::string& s, int below) -> std::optional<int> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const int v = std::stoi(s);
    if (v >= below) return std::nullopt;
    return v;
  };
  const auto node = number(rest.substr(0, colon), sub->nodes);
  if (!node)
    return bad(text, "expected a node from 0 to " + std::to_string(sub->nodes - 1) + " of subcluster '" + r.subcluster + "'");
  r.node = *node;
  if (colon != std::string::npos) {
    const auto device = number(rest.substr(colon + 1), sub->devices_per_node);
    if (!device) return bad(text, "expected a device from 0 to " + std::to_string(sub->devices_per_node - 1) + " of a node");
    r.device = *device;
  }
  return r;
}

}  // namespace

std::string to_string(const Device& d) { return d.subcluster + "/" + std::to_string(d.node) + ":" + std::to_string(d.device); }

const char* to_string(Route c) {
  switch (c) {
    case Route::in_place: return "in place";
    case Route::intra_node: return "intra-node";
    case Route::inter_node: return "inter-node";
    case Route::inter_subcluster: return "between subclusters";
    case Route::checkpoint: return "from the checkpoint";
  }
  return "?";
}

std::int64_t Switch::received(const Device& d) const {
  std::int64_t n = 0;
  for (const auto& t : transfers)
    if (t.to == d) n += t.bytes;
  return n;
}

Result<Reduced> without(const ClusterSpec& cluster, const std::vector<std::string>& removals) {
  // Per subcluster, per node: the devices removed.
  std::map<std::string, std::map<int, std::set<int>>> gone;
  for (const auto& text : removals) {
    auto r = parse(text, cluster);
    if (!r) return r.errors();
    const SubclusterSpec& sub = *cluster.find(r->subcluster);
    auto& devices = gone[r->subcluster][r->node];
    if (r->device) devices.insert(*r->device);
    else
      for (int d = 0; d < sub.devices_per_node; ++d) devices.insert(d);
  }
  Reduced out;
  out.cluster.name = cluster.name + " without " + std::to_string(removals.size()) + " removal(s)";
  out.cluster.default_link = cluster.default_link;
  // Each new subcluster's parent, for its links.
  std::map<std::string, std::string> parent;
  for (const auto& sub : cluster.subclusters) {
    const auto g = gone.find(sub.name);
    std::vector<int> whole;                       // old nodes kept whole
    std::vector<std::pair<int, std::vector<int>>> partial;  // old node, its devices left
    for (int n = 0; n < sub.nodes; ++n) {
      const std::set<int> none;
      const auto& removed = g == gone.end() || !g->second.count(n) ? none : g->second.at(n);
      if (removed.empty()) {
        whole.push_back(n);
        continue;
      }
      std::vector<int> left;
      for (int d = 0; d < sub.devices_per_node; ++d)
        if (!removed.count(d)) left.push_back(d);
      if (!left.empty()) partial.push_back({n, left});
    }
    if (!whole.empty()) {
      SubclusterSpec s = sub;
      s.nodes = int(whole.size());
      if (s.nodes == 1) s.inter_node.reset();
      out.cluster.subclusters.push_back(s);
      parent[s.name] = sub.name;
      for (int k = 0; k < s.nodes; ++k)
        for (int d = 0; d < s.devices_per_node; ++d) out.old_of.push_back({{s.name, k, d}, Device{sub.name, whole[std::size_t(k)], d}});
    }
    for (const auto& [node, left] : partial) {
      SubclusterSpec s = sub;
      s.name = sub.name + "-n" + std::to_string(node);
      s.nodes = 1, s.devices_per_node = int(left.size());
      s.inter_node.reset();
      out.cluster.subclusters.push_back(s);
      parent[s.name] = sub.name;
      for (int d = 0; d < s.devices_per_node; ++d) out.old_of.push_back({{s.name, 0, d}, Device{sub.name, node, left[std::size_t(d)]}});
    }
  }
  if (out.cluster.subclusters.empty()) return bad(removals.back(), "removes every device of the cluster");
  // Links: between the parts of one old subcluster its inter-node link (its intra-node one when
  // it had a single node, all of whose devices are then in the parts); otherwise the old link.
  for (std::size_t i = 0; i < out.cluster.subclusters.size(); ++i)
    for (std::size_t j = i + 1; j < out.cluster.subclusters.size(); ++j) {
      const auto& a = out.cluster.subclusters[i];
      const auto& b = out.cluster.subclusters[j];
      const std::string& pa = parent[a.name];
      const std::string& pb = parent[b.name];
      if (pa == pb) {
        const SubclusterSpec& old = *cluster.find(pa);
        out.cluster.links.push_back({a.name, b.name, old.inter_node.value_or(old.intra_node)});
      } else {
        out.cluster.links.push_back({a.name, b.name, cluster.link_between(pa, pb)});
      }
    }
  return out;
}

Reduced matched(const ClusterSpec& old_cluster, const ClusterSpec& new_cluster) {
  Reduced out;
  out.cluster = new_cluster;
  for (const auto& sub : new_cluster.subclusters) {
    const SubclusterSpec* old = old_cluster.find(sub.name);
    for (int n = 0; n < sub.nodes; ++n)
      for (int d = 0; d < sub.devices_per_node; ++d) {
        std::optional<Device> was;
        if (old && old->device.type == sub.device.type && n < old->nodes && d < old->devices_per_node) was = Device{sub.name, n, d};
        out.old_of.push_back({{sub.name, n, d}, was});
      }
  }
  return out;
}

namespace {

// Every rank of a plan: its device and the pieces it holds.
struct Holding {
  Device device;
  std::vector<program::Piece> pieces;
};
std::vector<Holding> holdings(const Plan& plan) {
  const program::Topology topology(plan);
  std::vector<Holding> out;
  for (int r = 0; r < topology.ranks(); ++r) {
    const Stage& s = topology.stage_of(r);
    const DeviceRef& d = topology.device_of(r);
    out.push_back({{s.subcluster, d.node, d.device},
                   program::stage_pieces(plan.model, s.first, s.last, topology.place(r).shard, s.tp)});
  }
  return out;
}

LinkSpec link_of(const ClusterSpec& c, const Device& a, const Device& b, Route& cls) {
  if (a.subcluster != b.subcluster) {
    cls = Route::inter_subcluster;
    return c.link_between(a.subcluster, b.subcluster);
  }
  const SubclusterSpec& sub = *c.find(a.subcluster);
  if (a.node == b.node) {
    cls = Route::intra_node;
    return sub.intra_node;
  }
  cls = Route::inter_node;
  return sub.inter_node.value_or(sub.intra_node);
}

// Whether the slice holds element (r, c) of its tensor's [rows, cols] view.
bool holds(const program::Slice& s, std::int64_t r, std::int64_t c) {
  return s.row0 <= r && r < s.row0 + s.rows && s.col0 <= c && c < s.col0 + s.cols;
}

}  // namespace

Result<Switch> switch_between(const Plan& old_plan, const Plan& new_plan, const Reduced& reduced) {
  for (const Plan* p : {&old_plan, &new_plan}) {
    if (p->granularity != Granularity::layer)
      return failure(ErrorKind::unsupported, "replan counts a switch between plans of layer granularity (the executor runs no other)");
    if (p->model.training.zero_stage != 0)
      return failure(ErrorKind::unsupported,
                     "replan counts a switch of ZeRO-0 plans only: under ZeRO the AdamW moments' owners are the runtime's "
                     "gradient buckets, which the planner does not have yet (zero_stage " +
                         std::to_string(p->model.training.zero_stage) + ")");
  }
  // The old plan's holders, by tensor, named as devices of the new cluster (lost ones dropped).
  std::map<Device, Device> new_of;  // old device -> new
  for (const auto& [now, was] : reduced.old_of)
    if (was) new_of[*was] = now;
  struct Held {
    program::Slice slice;
    Device device;  // in the new cluster
  };
  std::map<std::string, std::vector<Held>> holders;
  for (auto& h : holdings(old_plan)) {
    auto it = new_of.find(h.device);
    if (it == new_of.end()) continue;  // lost with its device
    for (auto& p : h.pieces) holders[p.name].push_back({std::move(p.slice), it->second});
  }
  Switch out;
  std::map<std::pair<std::optional<Device>, Device>, std::int64_t> bytes;  // (from, to) -> bytes
  std::map<Device, std::int64_t> load;  // bytes a holder sends so far
  for (auto& h : holdings(new_plan)) {
    for (auto& p : h.pieces) {
      const program::Slice& need = p.slice;
      const auto& held = holders[p.name];
      // The grid of every holder's edges inside the piece: each cell is held whole or not at all.
      const std::int64_t r0 = need.row0, r1 = need.row0 + need.rows, c0 = need.col0, c1 = need.col0 + need.cols;
      std::set<std::int64_t> rows = {r0, r1}, cols = {c0, c1};
      for (const auto& x : held) {
        for (auto r : {x.slice.row0, x.slice.row0 + x.slice.rows})
          if (r0 < r && r < r1) rows.insert(r);
        for (auto c : {x.slice.col0, x.slice.col0 + x.slice.cols})
          if (c0 < c && c < c1) cols.insert(c);
      }
      for (auto r = rows.begin(); std::next(r) != rows.end(); ++r)
        for (auto c = cols.begin(); std::next(c) != cols.end(); ++c) {
          const std::int64_t cell = (*std::next(r) - *r) * (*std::next(c) - *c) * kBytesPerElement;
          std::optional<Device> from;
          Route best_route = Route::checkpoint;
          double best_bw = -1;
          for (const auto& x : held) {
            if (!holds(x.slice, *r, *c)) continue;
            if (x.device == h.device) {  // already here
              from = x.device, best_route = Route::in_place;
              break;
            }
            Route cls;
            const double bw = link_of(reduced.cluster, x.device, h.device, cls).bandwidth;
            if (bw > best_bw || (bw == best_bw && load[x.device] < load[*from])) from = x.device, best_route = cls, best_bw = bw;
          }
          out.bytes_by_route[int(best_route)] += cell;
          if (best_route == Route::in_place) continue;
          if (from) load[*from] += cell;
          bytes[{from, h.device}] += cell;
        }
    }
  }
  // The fused send/receive: each device's messages one after another on its port.
  std::map<Device, double> send_s, receive_s;
  for (const auto& [ends, n] : bytes) {
    Transfer t{ends.first, ends.second, Route::checkpoint, n};
    if (t.from) {
      const LinkSpec l = link_of(reduced.cluster, *t.from, t.to, t.route);
      const double s = l.latency + double(n) / l.bandwidth;
      send_s[*t.from] += s, receive_s[t.to] += s;
    }
    out.transfers.push_back(t);
  }
  for (const auto* m : {&send_s, &receive_s})
    for (const auto& [d, s] : *m) out.predicted_s = std::max(out.predicted_s, s);
  return out;
}

nlohmann::ordered_json to_json(const Switch& s) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json by = nlohmann::ordered_json::object();
  for (auto c : {Route::in_place, Route::intra_node, Route::inter_node, Route::inter_subcluster, Route::checkpoint})
    by[to_string(c)] = s.bytes_by_route[int(c)];
  j["bytes_by_link"] = by;
  j["predicted_s"] = s.predicted_s;
  j["transfers"] = nlohmann::ordered_json::array();
  for (const auto& t : s.transfers)
    j["transfers"].push_back({{"from", t.from ? to_string(*t.from) : std::string("checkpoint")},
                              {"to", to_string(t.to)},
                              {"route", to_string(t.route)},
                              {"bytes", t.bytes}});
  return j;
}

std::string table(const Switch& s) {
  std::ostringstream out;
  char line[160];
  out << "switch: bytes by link (values and AdamW moments, fp32)\n";
  for (auto c : {Route::in_place, Route::intra_node, Route::inter_node, Route::inter_subcluster, Route::checkpoint}) {
    std::snprintf(line, sizeof line, "  %-20s %14lld\n", to_string(c), static_cast<long long>(s.bytes_by_route[int(c)]));
    out << line;
  }
  std::snprintf(line, sizeof line, "predicted switch time %.6f s (one fused send/receive; checkpoint reads not included)\n", s.predicted_s);
  out << line;
  return out.str();
}

}  // namespace het::replan
