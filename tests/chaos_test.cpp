// Chaos (issue 18): a fault at a random moment of a running job — an agent killed or stopped,
// a worker killed or stopped, the submitter killed; run-local with a rank killed or stopped —
// and after each the contract is checked: the job stops everywhere within 15 s of the fault,
// the failed or hung node and rank are named with the kind of the failure (killed, hung), no
// worker is left behind, and the next job on the same agents (or run-local) runs to the end.
//
// Trials per fault: HET_CHAOS_TRIALS (default 2 in the suite; scripts/chaos.sh runs more), the
// moments and victims drawn from HET_CHAOS_SEED (default 1). Every trial prints one line
// "chaos fault=F trial=I victim=V moment_s=M stopped_s=S named=1 left=0 next=1" for the script.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "agents_fixture.hpp"
#include "job/placement.hpp"
#include "process.hpp"
#include "validation/inputs.hpp"

using het::test::Agents;
using het::test::Background;
using het::test::find_processes;
using het::test::run_process;
using het::test::submit_args;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kSrc = HET_SOURCE_DIR;
constexpr double kStopBoundS = 15;  // the contract

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The node each rank of `plan` runs on.
std::map<int, std::string> node_of_rank(const std::string& plan, const std::string& model, const std::string& cluster) {
  het::InputFiles files;
  files.plan = plan, files.model = model, files.cluster = cluster;
  auto loaded = het::load_plan_inputs(files);
  REQUIRE(loaded);
  std::map<int, std::string> out;
  for (const auto& node : het::job::nodes_of(loaded->plan))
    for (const auto& r : het::job::ranks_on(loaded->plan, node)) out[r.rank] = node.to_string();
  return out;
}

// Waits until `n` workers whose command line holds `root` run (true), for at most timeout_s.
bool workers_running(const std::string& root, std::size_t n, double timeout_s) {
  const auto start = Clock::now();
  while (seconds_since(start) < timeout_s) {
    if (find_processes({"worker", root}).size() >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The pid of the worker of `rank` whose command line holds `root`, or -1.
int worker_pid(const std::string& root, int rank) {
  auto pids = find_processes({"worker", root, "--rank " + std::to_string(rank) + " "});
  return pids.empty() ? -1 : pids.front();
}

struct Outcome {
  bool named = false;       // the report names the node (agents) and the rank (worker faults)
  double stopped_s = 1e9;   // fault to: the launcher has ended and no worker is left
  bool left = true;         // a worker still ran kStopBoundS after the fault
  bool next = false;        // the next job ran to the end
  std::string nodes_said;   // `hetexec status` after the submitter was killed: shown when it names no cause
};

void report(const char* fault, int trial, const std::string& victim, double moment_s, const Outcome& o) {
  std::cout << "chaos fault=" << fault << " trial=" << trial << " victim=" << victim << " moment_s=" << moment_s
            << " stopped_s=" << o.stopped_s << " named=" << o.named << " left=" << o.left << " next=" << o.next << std::endl;
  INFO("the nodes said:\n" << o.nodes_said);
  CHECK(o.named);
  CHECK(o.stopped_s <= kStopBoundS);
  CHECK_FALSE(o.left);
  CHECK(o.next);
}

enum class AgentFault { kill_agent, stop_agent, kill_worker, stop_worker, kill_submit };

const char* name(AgentFault f) {
  switch (f) {
    case AgentFault::kill_agent: return "kill-agent";
    case AgentFault::stop_agent: return "stop-agent";
    case AgentFault::kill_worker: return "kill-worker";
    case AgentFault::stop_worker: return "stop-worker";
    case AgentFault::kill_submit: return "kill-submit";
  }
  return "?";
}

// Trials of one fault on a job of the four agents (6 ranks).
void agent_trials(AgentFault fault) {
  const int trials = env_int("HET_CHAOS_TRIALS", 2);
  std::mt19937 rng(std::uint32_t(env_int("HET_CHAOS_SEED", 1)) * 31 + std::uint32_t(fault));
  het::test::TempDir dir;
  const std::string token = dir.write_private("token", "chaos");
  Agents agents(token);
  const auto nodes = node_of_rank(het::test::kAgentsPlan, het::test::kTinyModel, het::test::kAgentsCluster);
  const int world = int(nodes.size());
  for (int trial = 0; trial < trials; ++trial) {
    INFO(name(fault) << " trial " << trial);
    const int agent = int(rng() % 4), rank = int(rng() % std::uint32_t(world));
    const double moment_s = 0.2 + std::uniform_real_distribution<double>(0, 2)(rng);
    const bool on_worker = fault == AgentFault::kill_worker || fault == AgentFault::stop_worker;
    const std::string victim = fault == AgentFault::kill_submit ? "submit"
                               : on_worker                      ? "rank " + std::to_string(rank) + " on " + nodes.at(rank)
                                                                : std::string(Agents::kNodes[agent]);
    Background submitter(submit_args(agents, token, {"--steps", "100000", "--hang-timeout", "4", "--heartbeat-timeout", "2", "--lease", "2"}));
    REQUIRE(workers_running(agents.root(), std::size_t(world), 60));
    std::this_thread::sleep_for(std::chrono::duration<double>(moment_s));
    const auto fault_at = Clock::now();
    switch (fault) {
      case AgentFault::kill_agent: agents[agent].signal(SIGKILL); break;
      case AgentFault::stop_agent: agents[agent].signal(SIGSTOP); break;
      case AgentFault::kill_worker: ::kill(worker_pid(agents.root(), rank), SIGKILL); break;
      case AgentFault::stop_worker: ::kill(worker_pid(agents.root(), rank), SIGSTOP); break;
      case AgentFault::kill_submit: submitter.signal(SIGKILL); break;
    }
    Outcome o;
    const auto result = submitter.wait(kStopBoundS + 15);
    o.left = !het::test::all_gone({"worker", agents.root()}, std::max(0.0, kStopBoundS - seconds_since(fault_at)));
    if (!o.left) o.stopped_s = seconds_since(fault_at);
    INFO(result.out << result.err);
    const std::string& err = result.err;
    auto says = [&](const std::string& text) { return err.find(text) != std::string::npos; };
    switch (fault) {
      // The root cause, and its kind (launch/cause.hpp): a node or worker gone is killed, one
      // silent is hung.
      case AgentFault::kill_agent: o.named = result.exit_code == 1 && says("failed (killed): node " + victim); break;
      case AgentFault::stop_agent:
        o.named = result.exit_code == 1 && says("failed (hung): node " + victim) && says("stopped answering");
        break;
      case AgentFault::kill_worker:
        o.named = result.exit_code == 1 && says("failed (killed): node " + nodes.at(rank)) &&
                  says("rank " + std::to_string(rank) + " was killed by signal 9");
        break;
      case AgentFault::stop_worker:
        o.named = result.exit_code == 1 && says("failed (hung): node " + nodes.at(rank)) && says("rank " + std::to_string(rank) + " hung");
        break;
      case AgentFault::kill_submit: {  // every node names why it stopped the job
        auto st = run_process({HETEXEC_BIN, "status", "--agents", agents.list(), "--token-file", token});
        for (int i = 0; i < 50 && st.out.find("running") != std::string::npos; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          st = run_process({HETEXEC_BIN, "status", "--agents", agents.list(), "--token-file", token});
        }
        // Its lease expired; or, killed while the workers still met through the job's rendezvous
        // (submit serves it), the workers lost the rendezvous first, and the nodes say that
        // (seen in fresh-clone CI runs under load: "rendezvous 127.0.0.1:P: wait for 'seat-0' of
        // job J: UNAVAILABLE: recvmsg:Connection reset by peer", 0.28 s after the kill).
        const bool why = st.out.find("lease expired") != std::string::npos || st.out.find("rendezvous") != std::string::npos;
        o.named = why && st.out.find("running") == std::string::npos;
        o.nodes_said = st.out + st.err;
        break;
      }
    }
    // The node comes back: a stopped agent continues, a killed one starts anew.
    if (fault == AgentFault::stop_agent) agents[agent].signal(SIGCONT);
    if (fault == AgentFault::kill_agent) agents.restart(agent);
    // The next job runs on the same nodes (an agent that was stopped may take its lease, 2 s,
    // to notice that its job is over and free the devices).
    for (int attempt = 0; attempt < 10 && !o.next; ++attempt) {
      auto next = run_process(submit_args(agents, token, {"--steps", "2"}), 120);
      o.next = next.exit_code == 0;
      if (!o.next && next.err.find("busy") == std::string::npos) {
        std::cout << "chaos next job failed (exit " << next.exit_code << "): " << next.err << std::endl;
        for (int i = 0; i < 4; ++i)  // is an agent that was not the victim gone, and why?
          std::cout << "  agent " << Agents::kNodes[i] << " pid " << agents[i].pid()
                    << (het::test::alive(agents[i].pid()) ? " alive" : " GONE") << "; its stderr:\n" << agents[i].err() << std::endl;
        break;
      }
      if (!o.next) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    report(name(fault), trial, victim, moment_s, o);
    for (int pid : find_processes({"worker", agents.root()})) ::kill(pid, SIGKILL);  // what a failed trial left
  }
}

// Trials of a rank of run-local killed or stopped (the mixed plan: 5 ranks on 2 nodes).
void run_local_trials(bool stop) {
  const int trials = env_int("HET_CHAOS_TRIALS", 2);
  std::mt19937 rng(std::uint32_t(env_int("HET_CHAOS_SEED", 1)) * 31 + 17 + std::uint32_t(stop));
  // run-local makes its job's directory under $TMPDIR: one of this test's own tells its
  // workers from those of tests running beside it.
  het::test::TempDir scratch;
  const std::string plan = kSrc + "/tests/data/plans/mixed.plan.json", model = het::test::kTinyModel,
                    cluster = kSrc + "/configs/clusters/demo-1x4a100-1x4v100.yaml";
  const std::vector<std::string> job = {HETEXEC_BIN, "run-local", plan, "--model", model, "--cluster", cluster};
  const int world = 5;
  for (int trial = 0; trial < trials; ++trial) {
    INFO((stop ? "stop" : "kill") << "-rank trial " << trial);
    const std::string own = scratch.path() + "/trial-" + std::to_string(trial);  // one per trial: trials independent
    std::filesystem::create_directories(own);
    ::setenv("TMPDIR", own.c_str(), 1);
    const int rank = int(rng() % world);
    const double moment_s = 0.2 + std::uniform_real_distribution<double>(0, 2)(rng);
    auto argv = job;
    argv.insert(argv.end(), {"--steps", "100000", "--hang-timeout", "3"});
    Background launcher(argv);
    REQUIRE(workers_running(own, world, 60));
    std::this_thread::sleep_for(std::chrono::duration<double>(moment_s));
    const auto fault_at = Clock::now();
    ::kill(worker_pid(own, rank), stop ? SIGSTOP : SIGKILL);
    Outcome o;
    const auto result = launcher.wait(kStopBoundS + 15);
    o.left = !het::test::all_gone({"worker", own}, std::max(0.0, kStopBoundS - seconds_since(fault_at)));
    if (!o.left) o.stopped_s = seconds_since(fault_at);
    INFO(result.out << result.err);
    const std::string want = (stop ? "error: hung: " : "error: killed: ") + std::string("rank ") + std::to_string(rank) +
                             (stop ? " hung" : " failed: killed by signal 9");
    o.named = result.exit_code == 1 && result.err.find(want) != std::string::npos;
    auto next = job;
    next.insert(next.end(), {"--steps", "2"});
    o.next = run_process(next, 120).exit_code == 0;
    report(stop ? "stop-rank" : "kill-rank", trial, "rank " + std::to_string(rank), moment_s, o);
    for (int pid : find_processes({"worker", own})) ::kill(pid, SIGKILL);  // what a failed trial left
  }
  ::unsetenv("TMPDIR");
}

}  // namespace

TEST_CASE("chaos: an agent killed at a random moment") { agent_trials(AgentFault::kill_agent); }
TEST_CASE("chaos: an agent stopped at a random moment") { agent_trials(AgentFault::stop_agent); }
TEST_CASE("chaos: a worker killed at a random moment") { agent_trials(AgentFault::kill_worker); }
TEST_CASE("chaos: a worker stopped at a random moment") { agent_trials(AgentFault::stop_worker); }
TEST_CASE("chaos: the submitter killed at a random moment") { agent_trials(AgentFault::kill_submit); }
TEST_CASE("chaos: run-local with a rank killed at a random moment") { run_local_trials(false); }
TEST_CASE("chaos: run-local with a rank stopped at a random moment") { run_local_trials(true); }
