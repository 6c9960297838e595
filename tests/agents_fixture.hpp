#pragma once
// Four `hetexec agent` daemons on loopback, the nodes of tests/data/agents/cluster.yaml (the
// v100 nodes emulated 2x slower), for the tests that run jobs on agents (agent_test.cpp,
// chaos_test.cpp). Each agent's work directory is under root(): the command line of every
// worker they start names its job file there, so root() tells one test's workers from those of
// tests running beside it. Needs HETEXEC_BIN and HET_SOURCE_DIR.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "process.hpp"

namespace het::test {

inline const std::string kAgentsPlan = std::string(HET_SOURCE_DIR) + "/tests/data/agents/plan.json";
inline const std::string kAgentsCluster = std::string(HET_SOURCE_DIR) + "/tests/data/agents/cluster.yaml";
inline const std::string kTinyModel = std::string(HET_SOURCE_DIR) + "/configs/models/tiny-gpt.yaml";

class Agents {
 public:
  static constexpr const char* kNodes[] = {"a100/0", "a100/1", "v100/0", "v100/1"};

  explicit Agents(const std::string& token_file, std::vector<std::string> devices = {"cpu:2", "cpu:2", "cpu:1", "cpu:1"})
      : token_file_(token_file), devices_(std::move(devices)), agents_(4), addresses_(4) {
    std::filesystem::create_directories(checkpoint_root());
    for (int i = 0; i < 4; ++i) launch(i);
    for (int i = 0; i < 4; ++i) wait_listening(i);
  }
  // SUB/IDX=HOST:PORT,... of the four, for --agents.
  std::string list() const {
    std::string out;
    for (int i = 0; i < 4; ++i) out += std::string(i ? "," : "") + kNodes[i] + "=" + addresses_[std::size_t(i)];
    return out;
  }
  const std::string& root() const { return work_.path(); }
  // Every agent's --checkpoint-root: one directory, as nodes sharing a file system would see it.
  std::string checkpoint_root() const { return work_.path() + "/checkpoints"; }
  // SUB/IDX=HOST:PORT of agent i.
  std::string entry(int i) const { return std::string(kNodes[i]) + "=" + addresses_[std::size_t(i)]; }
  Background& operator[](int i) { return *agents_[std::size_t(i)]; }
  // Starts agent i anew (after it was killed), on a new port.
  void restart(int i) {
    agents_[std::size_t(i)].reset();
    launch(i);
    wait_listening(i);
  }

 private:
  void launch(int i) {
    std::vector<std::string> argv = {HETEXEC_BIN, "agent", "--listen", "127.0.0.1:0", "--node", kNodes[i], "--devices",
                                     devices_[std::size_t(i)], "--token-file", token_file_, "--workdir",
                                     work_.path() + "/agent-" + std::to_string(i), "--checkpoint-root", checkpoint_root()};
    if (i >= 2) argv.insert(argv.end(), {"--emulate-slowdown", "2"});
    agents_[std::size_t(i)] = std::make_unique<Background>(argv);
  }
  void wait_listening(int i) {
    auto& a = *agents_[std::size_t(i)];
    if (!a.wait_for_output("listening on ", 20)) throw std::runtime_error(std::string("agent ") + kNodes[i] + " did not start: " + a.err());
    const std::string out = a.out();
    const auto at = out.find("listening on ") + 13;
    addresses_[std::size_t(i)] = out.substr(at, out.find('\n', at) - at);
  }
  TempDir work_;
  std::string token_file_;
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<Background>> agents_;
  std::vector<std::string> addresses_;
};

// Waits up to timeout_s for no process to match `words`.
inline bool all_gone(const std::vector<std::string>& words, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!find_processes(words).empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// `hetexec submit` of the agents' plan to them, with `more` options.
inline std::vector<std::string> submit_args(const Agents& agents, const std::string& token_file, const std::vector<std::string>& more) {
  std::vector<std::string> argv = {HETEXEC_BIN, "submit", kAgentsPlan, "--model", kTinyModel, "--cluster", kAgentsCluster,
                                   "--agents", agents.list(), "--token-file", token_file};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

}  // namespace het::test
