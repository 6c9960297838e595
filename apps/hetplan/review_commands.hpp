#pragma once
// `hetplan diff` and `hetplan check` (plan review): their options and output for people and
// for machines. The work is done in libplan/review. Exit status: diff 0 same, 1 different;
// check 0 all rules pass, 1 a rule is violated; both 2 for unreadable or invalid input.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

namespace hetplan {

class ReviewCommands {
 public:
  // Adds the `diff` and `check` subcommands to `app`.
  explicit ReviewCommands(CLI::App& app);
  ~ReviewCommands();
  // After app.parse(): the exit status of the review command that was given, if one was.
  std::optional<int> run() const;

 private:
  struct Args;
  std::unique_ptr<Args> args_;  // CLI11 writes the options here, so it must not move
  CLI::App* diff_ = nullptr;
  CLI::App* check_ = nullptr;
};

}  // namespace hetplan
