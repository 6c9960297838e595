#pragma once
// The commands about this machine (devices, profile), registered on the CLI app; run() runs
// the one that was parsed. Errors are sentences on stderr; exit 2 for bad input, 1 for a
// measurement that failed, 0 for success.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "profiler/profiler.hpp"

namespace het::cli {

class MachineCommands {
 public:
  MachineCommands(CLI::App& app, std::string version);
  // The exit status of the parsed command, or -1 when none of these was parsed.
  int run();

 private:
  int run_devices();
  int run_profile();
  std::string version_;
  CLI::App *devices_, *profile_;
  // devices
  std::string format_ = "text";
  std::optional<std::string> devices_out_;
  // profile
  std::string model_, profile_out_, backend_ = "cpu";
  std::optional<std::string> training_;  // a Hugging Face config's training fields (spec/hf_config.hpp)
  std::optional<std::string> where_;  // --devices
  int threads_ = 0;
  double spread_percent_ = 1;
  profiler::Options options_;
};

}  // namespace het::cli
