#include "spec/catalog.hpp"

#include <set>

#include "spec/catalog_text.hpp"
#include "spec/limits.hpp"

namespace het {

using input::Need;
using units::Dimension;

const CatalogDevice* DeviceCatalog::find(const std::string& type) const {
  for (const auto& d : devices)
    if (d.device.type == type) return &d;
  return nullptr;
}

std::optional<LinkSpec> read_link(const input::Fields& parent, std::string_view key, Need need) {
  auto f = parent.map(key, need, {"bandwidth", "latency"});
  if (!f) return std::nullopt;
  auto bw = f->quantity("bandwidth", Dimension::bandwidth, Need::required);
  auto lat = f->quantity("latency", Dimension::time, Need::required, /*allow_zero=*/true);
  if (!bw || !lat) return std::nullopt;
  return LinkSpec{*bw, *lat};
}

Result<DeviceCatalog> read_catalog(const input::Document& doc) {
  Diagnostics errors;
  input::Context ctx{doc.file, &errors};
  input::Fields top(ctx, doc.root, "", {"format", "reserve", "devices"});
  if (auto format = top.string("format", Need::required); format && *format != "hetplan.devices/v1")
    top.error("format", "expected hetplan.devices/v1, got '" + *format + "'");
  DeviceCatalog catalog;
  std::set<std::string> names;
  const double reserve = top.quantity("reserve", Dimension::bytes, Need::optional).value_or(0);  // every entry's default
  if (auto list = top.list("devices", Need::required, limits::kCatalogDevices)) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      input::Fields f(ctx, (*list)[i], input::index("devices", i),
                      {"name", "memory", "peak", "mem_bandwidth", "reserve", "price", "intra_node", "source"});
      if (!f.is_map()) continue;
      CatalogDevice d;
      d.device.type = f.string("name", Need::required).value_or("");
      d.device.memory = f.quantity("memory", Dimension::bytes, Need::required).value_or(0);
      d.device.peak = f.quantity("peak", Dimension::flops, Need::required).value_or(0);
      d.device.mem_bandwidth = f.quantity("mem_bandwidth", Dimension::bandwidth, Need::required).value_or(0);
      d.device.reserve = f.quantity("reserve", Dimension::bytes, Need::optional).value_or(reserve);
      if (d.device.memory > 0 && d.device.reserve >= d.device.memory)
        f.error("reserve", "the reserve is at least the device's memory: nothing would be left for the model");
      if (auto v = f.quantity("price", Dimension::price, Need::optional)) {
        if (*v <= 0) f.error("price", "a price is above 0 (leave it out when not known)");
        else d.device.price = *v;
      }
      d.intra_node = read_link(f, "intra_node", Need::required).value_or(LinkSpec{});
      d.source = f.string("source", Need::required).value_or("");
      if (!d.device.type.empty() && !names.insert(d.device.type).second)
        f.error("name", "device '" + d.device.type + "' is listed twice");
      catalog.devices.push_back(std::move(d));
    }
  }
  if (!errors.empty()) return errors;
  return catalog;
}

Result<DeviceCatalog> load_catalog(const std::string& file) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  return read_catalog(*doc);
}

Result<DeviceCatalog> builtin_catalog() {
  auto doc = input::parse(kCatalogText, "configs/devices.yaml (built in)");
  if (!doc) return doc.errors();
  return read_catalog(*doc);
}

}  // namespace het
