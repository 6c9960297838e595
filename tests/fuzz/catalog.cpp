// Feeds: any bytes as a device catalog (devices.yaml, hetplan.devices/v1: input::parse, then
// read_catalog).
// Checks: no crash, hang or unbounded memory; a refusal names the file; every device of an
// accepted catalog is found by its name.
#include "fuzz.hpp"
#include "spec/catalog.hpp"

using namespace het;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "devices.yaml");
  if (!doc) return 0;
  auto catalog = read_catalog(*doc);
  if (!catalog) {
    fuzz::require_explained(catalog.errors(), "devices.yaml");
    return 0;
  }
  for (const auto& d : catalog->devices)
    fuzz::require(catalog->find(d.device.type) != nullptr, "every device of a catalog is found by its type", d.device.type);
  return 0;
}
