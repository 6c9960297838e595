#pragma once
// `hetexec submit` (DESIGN.md §9): runs a plan on the node agents. In order: every node the
// plan uses must have an agent; each agent is asked what it has (Describe) and checked against
// the plan (API version, device type, count, memory); the job's rendezvous is started here;
// every agent prepares its ranks (any refusal: nothing starts, the prepared ones are
// aborted); the workers start; rank 0's lines come back as progress. The job's lease is
// renewed by heartbeats; when an agent stops answering for longer than heartbeat_timeout_s, its
// event stream breaks, or a node reports a failure, the job is aborted everywhere and the
// result names the node and the reason (the root cause when several nodes fail together: a
// lost agent before a killed worker before a worker error before a peer's disappearance).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "control/credentials.hpp"
#include "diag/diag.hpp"
#include "job/placement.hpp"
#include "plan/plan.hpp"

namespace het::submit {

struct AgentAddress {
  job::NodeId node;
  std::string address;  // HOST:PORT
  // The agent's own name when it runs another node of the plan (a re-planned job's renumbered
  // cluster, submit/elastic.hpp); absent: `node`.
  std::optional<job::NodeId> serves;
  // The agent's device each of the plan's devices of `node` is (a re-planned node that lost a
  // device); empty: the same index.
  std::vector<int> devices = {};
  job::NodeId agent_node() const { return serves.value_or(node); }
};
// "SUB/IDX=HOST:PORT,SUB/IDX=HOST:PORT"
Result<std::vector<AgentAddress>> parse_agents(const std::string& list);
// An inventory file: `agents: [{node: a100/0, address: host:port}, ...]` (YAML).
Result<std::vector<AgentAddress>> read_inventory(const std::string& file);

struct Settings {
  int steps = 10;
  std::uint64_t seed = 1;
  double lr = 1e-3;
  std::string data_path;  // on the nodes
  bool emulate_links = false, emulate_devices = false;
  int threads = 0;
  double time_dilation = 1;  // runtime::Options::time_dilation
  double hang_timeout_s = 0;  // the agents' watchdog bound; 0: their default (progress/progress.hpp)
  // Checkpoints, under every agent's --checkpoint-root (JobSettings): empty dir/resume: none.
  std::string checkpoint_dir, resume;
  int checkpoint_every = 0, checkpoint_keep = 0;
  std::string rescue_from;  // JobSettings.rescue_from (submit/elastic.hpp)
  bool elastic = false;     // JobSettings.elastic: the workers keep their state when a peer is lost
};

struct Options {
  Plan plan;
  std::string plan_json;  // the plan as sent to the agents (with its model and cluster)
  std::vector<AgentAddress> agents;
  control::ClientSecurity security;         // to reach the agents
  std::string rendezvous_listen = "127.0.0.1:0";
  std::string rendezvous_advertise;         // HOST the workers reach the rendezvous at; empty: the listen host
  // TLS for the rendezvous: its certificate and key, and the CA the workers trust (empty: the
  // certificate itself, for a self-signed one). No certificate: plaintext (with the token).
  std::string rendezvous_tls_cert, rendezvous_tls_key, rendezvous_tls_ca;
  Settings settings;
  double heartbeat_interval_s = 1, heartbeat_timeout_s = 5, lease_s = 10;
  double call_timeout_s = 10;
  bool detach = false;  // return once rank 0 reports its first step; the job runs on without a lease
};

struct Outcome {
  std::string job_id;
  bool ok = false;
  bool refused = false;  // nothing started: the plan or a node's devices did not fit (exit 2)
  std::string failure;   // "node a100/1 (127.0.0.1:5001): ..." when !ok
  ErrorKind failure_kind = ErrorKind::invalid_input;  // of the root cause (launch/cause.hpp) when !ok
  std::optional<job::NodeId> failed_node;             // the plan's node of the root cause, when it was a node's
  std::optional<int> failed_rank;                     // and its rank, when it was one worker's
  std::chrono::steady_clock::time_point failed_at;    // when the first failure was noticed
};

// Runs the job. on_line sees rank 0's stdout lines; on_status short progress sentences.
Outcome submit(const Options& options, const std::function<void(const std::string&)>& on_line,
               const std::function<void(const std::string&)>& on_status);

// Every job each agent holds: "node  job  state  ranks  detail" rows, or the errors.
struct JobRow {
  std::string node, job_id, state, detail;
  std::vector<int> ranks;
  int lease_seconds_left = 0;
};
Result<std::vector<JobRow>> status(const std::vector<AgentAddress>& agents, const control::ClientSecurity& security,
                                   double call_timeout_s = 5);
// Aborts job_id on every agent that holds it; the number of agents that did.
Result<int> abort(const std::vector<AgentAddress>& agents, const control::ClientSecurity& security, const std::string& job_id,
                  const std::string& reason, double call_timeout_s = 5);

}  // namespace het::submit
