#include "spec/cluster.hpp"

#include <map>
#include <set>

#include "spec/limits.hpp"

namespace het {

using input::Need;
using units::Dimension;

const SubclusterSpec* ClusterSpec::find(const std::string& subcluster) const {
  int i = index_of(subcluster);
  return i < 0 ? nullptr : &subclusters[static_cast<std::size_t>(i)];
}

int ClusterSpec::index_of(const std::string& subcluster) const {
  for (std::size_t i = 0; i < subclusters.size(); ++i)
    if (subclusters[i].name == subcluster) return static_cast<int>(i);
  return -1;
}

LinkSpec ClusterSpec::link_between(const std::string& a, const std::string& b) const {
  for (const auto& l : links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return l.link;
  return default_link.value_or(LinkSpec{});
}

int ClusterSpec::num_devices() const {
  int n = 0;
  for (const auto& s : subclusters) n += s.num_devices();
  return n;
}

namespace {

// `device:` is a catalog name or a map {type, memory, peak, mem_bandwidth}. For a catalog
// type the map's fields override the catalog's; for other types all four are required.
// Returns the device and, for catalog devices, the catalog's intra-node link.
std::optional<DeviceSpec> read_device(const input::Fields& sub, const DeviceCatalog& catalog,
                                      const CatalogDevice** from_catalog) {
  *from_catalog = nullptr;
  YAML::Node node = sub.get("device");
  const auto& ctx = sub.context();
  if (!node.IsDefined()) {
    sub.error("device", "missing required field (a catalog name such as A100-40GB, or a map with type, memory, peak, mem_bandwidth)");
    return std::nullopt;
  }
  auto unknown_type = [&](const std::string& type, const YAML::Node& at, const std::string& path) {
    std::string names;
    for (const auto& d : catalog.devices) names += (names.empty() ? "" : ", ") + d.device.type;
    ctx.error(at, path, "device type '" + type + "' is not in the device catalog (" + names +
                            "); spell it out as {type, memory, peak, mem_bandwidth}");
  };
  if (node.IsScalar()) {
    auto type = input::as_string(ctx, node, sub.path_of("device"));
    if (!type) return std::nullopt;
    *from_catalog = catalog.find(*type);
    if (*from_catalog == nullptr) {
      unknown_type(*type, node, sub.path_of("device"));
      return std::nullopt;
    }
    return (*from_catalog)->device;
  }
  auto f = sub.map("device", Need::required, {"type", "memory", "peak", "mem_bandwidth", "efficiency", "reserve", "price"});
  if (!f) return std::nullopt;
  auto type = f->string("type", Need::required);
  if (!type) return std::nullopt;
  *from_catalog = catalog.find(*type);
  Need need = *from_catalog ? Need::optional : Need::required;
  DeviceSpec d = *from_catalog ? (*from_catalog)->device : DeviceSpec{*type, 0, 0, 0, 0};
  if (auto v = f->quantity("memory", Dimension::bytes, need)) d.memory = *v;
  if (auto v = f->quantity("peak", Dimension::flops, need)) d.peak = *v;
  if (auto v = f->quantity("mem_bandwidth", Dimension::bandwidth, need)) d.mem_bandwidth = *v;
  if (auto v = f->number("efficiency", Need::optional, 0.01, 1.0)) d.efficiency = *v;
  if (auto v = f->quantity("reserve", Dimension::bytes, Need::optional)) d.reserve = *v;
  if (auto v = f->quantity("price", Dimension::price, Need::optional)) {
    if (*v <= 0) {
      f->error("price", "a price is above 0 (leave it out when not known)");
      return std::nullopt;
    }
    d.price = *v;
  }
  if (d.memory > 0 && d.reserve >= d.memory) {
    f->error("reserve", "the reserve (" + units::format(d.reserve, Dimension::bytes) + ") is at least the device's memory (" +
                            units::format(d.memory, Dimension::bytes) + "): nothing would be left for the model");
    return std::nullopt;
  }
  return d;
}

}  // namespace

Result<ClusterSpec> read_cluster(const std::string& file, const YAML::Node& node, const std::string& path,
                                 const DeviceCatalog& catalog) {
  Diagnostics errors;
  input::Context ctx{file, &errors};
  input::Fields top(ctx, node, path, {"name", "subclusters", "links", "default_link"});
  if (!top.is_map()) return errors;
  ClusterSpec c;
  c.name = top.string("name", Need::required).value_or("");
  std::map<std::string, YAML::Node> sub_nodes;  // name -> its node, for duplicate reports
  std::int64_t devices = 0;  // in the subclusters before this one
  if (auto list = top.list("subclusters", Need::required, limits::kSubclusters)) {
    if (list->size() == 0) top.error("subclusters", "expected at least one subcluster");
    for (std::size_t i = 0; i < list->size(); ++i) {
      std::string p = input::index(top.path_of("subclusters"), i);
      input::Fields f(ctx, (*list)[i], p,
                      {"name", "device", "nodes", "devices_per_node", "intra_node", "inter_node"});
      if (!f.is_map()) continue;
      SubclusterSpec s;
      s.name = f.string("name", Need::required).value_or("");
      const CatalogDevice* from_catalog = nullptr;
      if (auto d = read_device(f, catalog, &from_catalog)) s.device = *d;
      s.nodes = static_cast<int>(f.integer("nodes", Need::required, 1, limits::kNodes).value_or(0));
      s.devices_per_node = static_cast<int>(f.integer("devices_per_node", Need::required, 1, limits::kDevicesPerNode).value_or(0));
      // The devices, counted in 64 bits and held to the cluster's limit (num_devices() is an int).
      if (s.nodes > 0 && s.devices_per_node > 0) {
        const auto product = limits::checked_product({s.nodes, s.devices_per_node});
        const std::int64_t total = product ? devices + *product : limits::kDevices.max + 1;
        if (!product || total > limits::kDevices.max) {
          f.error("nodes", "nodes x devices_per_node = " + std::to_string(s.nodes) + " x " + std::to_string(s.devices_per_node) +
                               " devices" + (devices > 0 ? " (" + std::to_string(total) + " with the subclusters before)" : "") +
                               ", more than the limit of " + std::to_string(limits::kDevices.max) + " " +
                               limits::kDevices.what);
        } else {
          devices = total;
        }
      }
      auto intra = read_link(f, "intra_node", from_catalog ? Need::optional : Need::required);
      if (intra) s.intra_node = *intra;
      else if (from_catalog && !f.has("intra_node")) s.intra_node = from_catalog->intra_node;
      s.inter_node = read_link(f, "inter_node", s.nodes > 1 ? Need::required : Need::optional);
      if (!s.name.empty() && s.name.find_first_not_of(
                                 "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                                 std::string::npos)
        f.error("name", "subcluster names use letters, digits, '_', '.' and '-' only, got '" + s.name + "'");
      if (!s.name.empty()) {
        if (auto [it, fresh] = sub_nodes.emplace(s.name, (*list)[i]); !fresh)
          f.error("name", "subcluster name '" + s.name + "' is already used at line " +
                              std::to_string(input::line_of(it->second)));
      }
      c.subclusters.push_back(std::move(s));
    }
  }

  std::set<std::pair<std::string, std::string>> linked;
  if (auto list = top.list("links", Need::optional, limits::kLinks)) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      std::string p = input::index(top.path_of("links"), i);
      input::Fields f(ctx, (*list)[i], p, {"between", "bandwidth", "latency"});
      if (!f.is_map()) continue;
      SubclusterLink l;
      auto bw = f.quantity("bandwidth", Dimension::bandwidth, Need::required);
      auto lat = f.quantity("latency", Dimension::time, Need::required, true);
      auto between = f.list("between", Need::required, limits::kSubclusters);
      if (between && between->size() != 2) {
        f.error("between", "expected two subcluster names, got " + std::to_string(between->size()));
        continue;
      }
      if (!between || !bw || !lat) continue;
      auto a = input::as_string(ctx, (*between)[0], input::index(f.path_of("between"), 0));
      auto b = input::as_string(ctx, (*between)[1], input::index(f.path_of("between"), 1));
      if (!a || !b) continue;
      bool known = true;
      for (std::size_t k = 0; k < 2; ++k) {
        const std::string& name = k == 0 ? *a : *b;
        if (!sub_nodes.count(name)) {
          std::string names;
          for (const auto& s : c.subclusters) names += (names.empty() ? "" : ", ") + s.name;
          ctx.error((*between)[k], input::index(f.path_of("between"), k),
                    "unknown subcluster '" + name + "' (subclusters: " + names + ")");
          known = false;
        }
      }
      if (!known) continue;
      if (*a == *b) {
        f.error("between", "a link joins two different subclusters; '" + *a + "' is given twice");
        continue;
      }
      auto key = std::minmax(*a, *b);
      if (!linked.insert({key.first, key.second}).second) {
        f.error("between", "the link between " + *a + " and " + *b + " is given twice");
        continue;
      }
      c.links.push_back({*a, *b, LinkSpec{*bw, *lat}});
    }
  }
  c.default_link = read_link(top, "default_link", Need::optional);

  if (errors.empty() && !c.default_link) {
    for (std::size_t i = 0; i < c.subclusters.size(); ++i)
      for (std::size_t j = i + 1; j < c.subclusters.size(); ++j) {
        auto key = std::minmax(c.subclusters[i].name, c.subclusters[j].name);
        if (!linked.count({key.first, key.second}))
          top.error(top.has("links") ? "links" : "subclusters",
                    "no link between subclusters " + c.subclusters[i].name + " and " + c.subclusters[j].name +
                        "; add {between: [" + c.subclusters[i].name + ", " + c.subclusters[j].name +
                        "], bandwidth: ..., latency: ...} or a default_link");
      }
  }
  if (!errors.empty()) return errors;
  return c;
}

Result<ClusterSpec> load_cluster(const std::string& file, const DeviceCatalog& catalog) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  return read_cluster(doc->file, doc->root, "", catalog);
}

namespace {
nlohmann::ordered_json link_json(const LinkSpec& l) {
  return {{"bandwidth", units::format(l.bandwidth, Dimension::bandwidth)},
          {"latency", units::format(l.latency, Dimension::time)}};
}
}  // namespace

nlohmann::ordered_json to_json(const ClusterSpec& c) {
  nlohmann::ordered_json subs = nlohmann::ordered_json::array();
  for (const auto& s : c.subclusters) {
    nlohmann::ordered_json j = {
        {"name", s.name},
        {"device",
         {{"type", s.device.type},
          {"memory", units::format(s.device.memory, Dimension::bytes)},
          {"peak", units::format(s.device.peak, Dimension::flops)},
          {"mem_bandwidth", units::format(s.device.mem_bandwidth, Dimension::bandwidth)}}},
        {"nodes", s.nodes},
        {"devices_per_node", s.devices_per_node},
        {"intra_node", link_json(s.intra_node)}};
    if (s.device.efficiency > 0) j["device"]["efficiency"] = s.device.efficiency;
    if (s.device.reserve > 0) j["device"]["reserve"] = units::format(s.device.reserve, Dimension::bytes);
    if (s.device.price > 0) j["device"]["price"] = units::format(s.device.price, Dimension::price);
    if (s.inter_node) j["inter_node"] = link_json(*s.inter_node);
    subs.push_back(std::move(j));
  }
  nlohmann::ordered_json out = {{"name", c.name}, {"subclusters", subs}};
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const auto& l : c.links) {
    auto j = link_json(l.link);
    links.push_back({{"between", {l.a, l.b}}, {"bandwidth", j["bandwidth"]}, {"latency", j["latency"]}});
  }
  if (!links.empty()) out["links"] = links;
  if (c.default_link) out["default_link"] = link_json(*c.default_link);
  return out;
}

}  // namespace het
