#pragma once
// The device catalog (configs/devices.yaml, format hetplan.devices/v1): datasheet facts per
// device type, so a cluster can say `device: A100-40GB` instead of spelling the device out.
// The shipped catalog is compiled into the binaries; a user may load another file.
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "input/input.hpp"

namespace het {

struct LinkSpec {
  double bandwidth = 0;  // bytes per second, per direction
  double latency = 0;    // seconds
};

struct DeviceSpec {
  std::string type;          // e.g. A100-40GB
  double memory = 0;         // bytes
  double peak = 0;           // dense bf16/fp16 FLOP/s
  double mem_bandwidth = 0;  // bytes per second
  double efficiency = 0;     // fraction of peak the analytic cost model assumes; 0: the default (0.5)
  // Bytes of `memory` the model cannot use: the CUDA context, the collectives' buffers, the
  // GEMM library's workspace (configs/devices.yaml says what each holds, with sources).
  double reserve = 0;
  // One device's rent, in US dollars per second (written USD/h); 0: not known. A plan's cost
  // is its devices' rent over its time (predict::Outcome; hetplan search --objective cost).
  double price = 0;
  // What a plan's stage may use of `memory`: all of it less the reserve.
  double usable_memory() const { return memory > reserve ? memory - reserve : 0; }
};

struct CatalogDevice {
  DeviceSpec device;
  LinkSpec intra_node;  // typical per-device intra-node link
  std::string source;   // where the numbers come from
};

struct DeviceCatalog {
  std::vector<CatalogDevice> devices;
  // nullptr when the type is not in the catalog.
  const CatalogDevice* find(const std::string& type) const;
};

Result<DeviceCatalog> read_catalog(const input::Document& doc);
Result<DeviceCatalog> load_catalog(const std::string& file);
// The catalog shipped in configs/devices.yaml, as compiled into this build.
Result<DeviceCatalog> builtin_catalog();

// Reads {bandwidth, latency} maps, shared by catalogs, clusters and profiles.
std::optional<LinkSpec> read_link(const input::Fields& parent, std::string_view key, input::Need need);

}  // namespace het
