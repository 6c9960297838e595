#pragma once
// `hetplan calibrate --trace T --plan P [--model F --cluster F] [--profile F...]
// [--time-dilation X] -o DIR_OR_FILE`: fits the profiles of the plan's device types to a
// measured run of the plan (libplan/fidelity/calibrate.hpp) and writes one profile.yaml per
// device type that had one. -o names a file when it ends in .yaml or .yml (one device type
// calibrated), else a directory (made if missing) that gets DEVICE.profile.yaml per type.
// Exit status: 0 written; 2 invalid input, nothing to calibrate, or an output it cannot write.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace hetplan {

class CalibrateCommand {
 public:
  explicit CalibrateCommand(CLI::App& app);  // adds the subcommand
  ~CalibrateCommand();
  // After app.parse(): the exit status when `calibrate` was given.
  std::optional<int> run() const;

 private:
  struct Args;
  std::unique_ptr<Args> args_;  // CLI11 writes the options here, so it must not move
  CLI::App* command_ = nullptr;
};

}  // namespace hetplan
