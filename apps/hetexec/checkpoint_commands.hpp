#pragma once
// `hetexec checkpoint inspect D` (what a checkpoint holds) and `hetexec checkpoint export D -o F`
// (its tensors whole, in one safetensors file any reader opens; docs/checkpoints.md names them),
// registered on the CLI app; run() runs the one that was parsed. Exit 2 for a checkpoint that
// cannot be read, 1 for an output that cannot be written, 0 for success.
#include <string>

#include <CLI/CLI.hpp>

namespace het::cli {

class CheckpointCommands {
 public:
  explicit CheckpointCommands(CLI::App& app);
  // The exit status of the parsed command, or -1 when none of these was parsed.
  int run();

 private:
  int run_inspect();
  int run_export();
  CLI::App *inspect_, *export_;
  std::string dir_, output_, format_ = "text";
  bool moments_ = false;
};

}  // namespace het::cli
