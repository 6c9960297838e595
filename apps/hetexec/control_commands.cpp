// `hetexec agent`, `submit`, `status` and `abort`: the commands of the control plane
// (libexec/agent, libexec/submit). Errors are sentences on stderr; exit 2 for bad input or a
// job refused before it started, 1 for a job that failed, 0 for success.
#include "control_commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/agent.hpp"
#include "input/address.hpp"
#include "progress.hpp"
#include "memory_prediction.hpp"
#include "options.hpp"
#include "plan/plan_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "program/program.hpp"
#include "replan/replan.hpp"
#include "submit/submit.hpp"
#include "validation/inputs.hpp"

namespace het::cli {

namespace {

int report(const Diagnostics& errors, int code = 2) {
  for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
  return code;
}

// The agents of a command: --agents or --inventory.
Result<std::vector<submit::AgentAddress>> agents_of(const std::string& list, const std::string& inventory) {
  if (!list.empty() && !inventory.empty()) return Diagnostic{"", 0, 0, "", "give --agents or --inventory, not both"};
  if (!inventory.empty()) return submit::read_inventory(inventory);
  if (list.empty()) return Diagnostic{"", 0, 0, "", "say where the agents are: --agents SUB/IDX=HOST:PORT,... or --inventory FILE"};
  return submit::parse_agents(list);
}

// How submit, status and abort reach the agents: a token, TLS trusting a CA, and a client
// certificate for agents that require one (agent --tls-ca).
Result<control::ClientSecurity> client_security(const std::string& token_file, const std::string& tls_ca,
                                                const std::string& tls_cert, const std::string& tls_key) {
  control::ClientSecurity s;
  if (!token_file.empty()) {
    auto token = control::read_token_file(token_file);
    if (!token) return token.errors();
    s.token = *token;
  }
  if (tls_cert.empty() != tls_key.empty())
    return Diagnostic{"", 0, 0, "", "a client certificate needs both --tls-cert and --tls-key"};
  if (!tls_ca.empty() || !tls_cert.empty()) s.tls = control::ClientTls{tls_ca, tls_cert, tls_key, ""};
  return s;
}

// Whether a listening address is reachable from this machine only.
bool loopback(const std::string& host) {
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// A recovery of an elastic job, for people: what was lost, the new plan, what it cost.
std::string recovery_text(const submit::Recovery& r) {
  std::ostringstream out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "elastic: %s lost after step %d; re-planned in %.2f s, training again %.2f s after the failure, "
                "from step %d (%d step%s lost) from %s\n",
                submit::lost_text(r).c_str(), r.failed_step, r.replan_s, r.recovery_s, r.resumed_step, r.steps_lost,
                r.steps_lost == 1 ? "" : "s", r.from_survivors ? "the survivors' state" : "the checkpoint");
  out << buf << "elastic: the new plan, " << program::Topology(r.plan).ranks() << " ranks:\n";
  for (std::size_t p = 0; p < r.plan.pipelines.size(); ++p)
    for (const auto& s : r.plan.pipelines[p].stages) {
      std::snprintf(buf, sizeof buf, "  pipeline %zu  %-12s layers %d-%d  tp %d dp %d cp %d\n", p, s.subcluster.c_str(), s.first, s.last, s.tp,
                    s.dp, s.cp);
      out << buf;
    }
  if (r.plan.predicted) {
    std::snprintf(buf, sizeof buf, "elastic: predicted %.4f s per iteration\n", r.plan.predicted->iteration_s);
    out << buf;
  }
  out << "elastic: the switch hetplan replan plans (what each device needs, by where it comes from):\n" << r.switch_table;
  if (r.moved) {
    out << "elastic: bytes moved by route, predicted by replan / read by the new ranks from the survivors' state:\n";
    for (auto route : {replan::Route::in_place, replan::Route::intra_node, replan::Route::inter_node, replan::Route::inter_subcluster}) {
      const auto k = std::size_t(route);
      std::snprintf(buf, sizeof buf, "  %-20s %14.0f %14.0f\n", replan::to_string(route), r.predicted ? double((*r.predicted)[k]) : -1.0,
                    (*r.moved)[k]);
      out << buf;
    }
  }
  return out.str();
}

nlohmann::ordered_json recoveries_json(const std::vector<submit::Recovery>& recoveries) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < recoveries.size(); ++k) {
    const auto& r = recoveries[k];
    out.push_back({{"lost", r.lost.to_string()}, {"lost_device", r.lost_device ? nlohmann::ordered_json(*r.lost_device) : nlohmann::ordered_json()},
                   {"why", r.why}, {"failed_step", r.failed_step}, {"resumed_step", r.resumed_step},
                   {"steps_lost", r.steps_lost}, {"replan_s", r.replan_s}, {"recovery_s", r.recovery_s},
                   {"ranks", program::Topology(r.plan).ranks()},
                   {"predicted_iteration_s", r.plan.predicted ? nlohmann::ordered_json(r.plan.predicted->iteration_s) : nlohmann::ordered_json()},
                   {"from", r.from_survivors ? "survivors" : "checkpoint"},
                   {"switch_predicted", r.predicted ? nlohmann::ordered_json{{"in_place", (*r.predicted)[0]}, {"intra_node", (*r.predicted)[1]},
                                                                             {"inter_node", (*r.predicted)[2]}, {"inter_subcluster", (*r.predicted)[3]},
                                                                             {"checkpoint", (*r.predicted)[4]}}
                                                    : nlohmann::ordered_json()},
                   {"switch_moved", r.moved ? nlohmann::ordered_json{{"in_place", (*r.moved)[0]}, {"intra_node", (*r.moved)[1]},
                                                                     {"inter_node", (*r.moved)[2]}, {"inter_subcluster", (*r.moved)[3]}}
                                            : nlohmann::ordered_json()},
                   {"plan", "replan-" + std::to_string(k + 1) + ".plan.json"}});
  }
  return out;
}

std::string self_executable() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, std::size_t(n)) : "hetexec";
}

}  // namespace

ControlCommands::ControlCommands(CLI::App& app, std::string version) : version_(std::move(version)) {
  agent_ = app.add_subcommand("agent", "Serve this node's devices to `hetexec submit` (a gRPC daemon)");
  agent_->add_option("--listen", listen_, "HOST:PORT to listen on")->required();
  agent_->add_option("--node", node_, "the plan's node this agent is: SUBCLUSTER/INDEX")->required();
  agent_->add_option("--devices", devices_, "cpu:N, cuda:all or cuda:N")->required();
  agent_->add_option("--emulate-slowdown", slowdown_, "stretch every worker's compute by X (an emulated slower node)")
      ->check(CLI::Range(1.0, 1000.0));
  agent_->add_option("--token-file", token_file_, "refuse every call without this bearer token (a file only its owner can read)");
  agent_->add_flag("--insecure", insecure_,
                   "serve an address beyond loopback without a token or client certificates: anyone who reaches it may run jobs");
  agent_->add_option("--tls-cert", tls_cert_, "serve TLS with this PEM certificate chain");
  agent_->add_option("--tls-key", tls_key_, "and this PEM private key");
  agent_->add_option("--tls-ca", tls_ca_, "require client certificates signed by this CA");
  agent_->add_option("--workdir", workdir_, "where job files go (default: a new directory under /tmp)");
  agent_->add_option("--data-root", data_root_, "serve only data files under this directory (relative paths are taken from it)");
  agent_->add_option("--checkpoint-root", checkpoint_root_,
                     "take jobs' checkpoints (--checkpoint-dir, --resume) under this directory, the same one on every node "
                     "(relative paths are taken from it; default: refuse checkpoints)");
  agent_->add_option("--advertise", advertise_, "IPv4 address the workers listen on for their peers (default 127.0.0.1)");

  submit_ = app.add_subcommand("submit", "Run a plan on node agents and follow it");
  submit_->add_option("plan", plan_, "plan.json")->required();
  submit_->add_option("--model", model_, "model.yaml, replacing the plan's own");
  submit_->add_option("--cluster", cluster_, "cluster.yaml, replacing the plan's own");
  submit_->add_option("--steps", settings_.steps, "training steps (default 10)")->check(CLI::Range(1, 10'000'000));
  submit_->add_option("--seed", settings_.seed, "seed of the weights and of synthetic data (default 1)");
  submit_->add_option("--lr", settings_.lr, "AdamW learning rate (default 1e-3)")->check(learning_rate());
  submit_->add_option("--data", settings_.data_path, "llm.c token file, at this path on every node (default: synthetic)");
  submit_->add_option("--threads", settings_.threads, "CPU threads per worker (default: each node's cores shared out)")
      ->check(CLI::Range(0, 1024));
  submit_->add_flag("--emulate-links", settings_.emulate_links, "shape each connection to its link in the plan's cluster");
  submit_->add_flag("--emulate-devices", settings_.emulate_devices, "slow each rank by (fastest peak / its device's peak)");
  submit_->add_option("--time-dilation", settings_.time_dilation,
                      "run every rank's compute and every shaped link X times slower (predict it with hetplan simulate --time-dilation X)")
      ->check(CLI::Range(1.0, 1000.0));
  submit_->add_option("--hang-timeout", settings_.hang_timeout_s,
                      "call a rank hung and stop the job when none of a node's ranks has made progress for this many seconds "
                      "(default: five predicted steps as the job runs them, at least 10)")
      ->check(CLI::Range(0.0, 86400.0));
  submit_->add_option("--checkpoint-dir", settings_.checkpoint_dir,
                      "write checkpoints there, under every agent's --checkpoint-root (docs/checkpoints.md)");
  submit_->add_option("--checkpoint-every", settings_.checkpoint_every, "with --checkpoint-dir: a checkpoint after every N steps and after the last")
      ->check(CLI::Range(1, 10'000'000));
  submit_->add_option("--keep", settings_.checkpoint_keep, "with --checkpoint-dir: keep the newest K checkpoints (default: all)")
      ->check(CLI::Range(1, 1'000'000));
  submit_->add_option("--resume", settings_.resume,
                      "start from a checkpoint (or the newest under a --checkpoint-dir), under every agent's --checkpoint-root, on this "
                      "plan or any other of the same model; --steps counts from the start of training");
  submit_->add_option("--metrics-out", metrics_out_, "write JSON lines {step, loss, step_s, tokens_per_s}, then {memory: [each rank's peak]}");
  submit_->add_flag("--detach", detach_, "return once training runs (no lease: stop it with `hetexec abort`)");
  submit_->add_flag("--elastic", elastic_,
                    "when a node or device is lost (its agent gone, a worker killed or hung there), re-plan for what is left and resume "
                    "from the survivors' state when they hold every part, else the newest checkpoint (needs --checkpoint-dir; "
                    "docs/checkpoints.md)");
  submit_->add_option("--elastic-out", elastic_out_, "with --elastic: write each new plan (replan-K.plan.json) and recoveries.json there");
  submit_->add_option("--replan-budget", elastic_options_.search_budget_s, "with --elastic: seconds of search per re-plan (default 2)")
      ->check(CLI::Range(0.01, 3600.0));
  submit_->add_option("--rendezvous-listen", rendezvous_listen_, "HOST:PORT for the job's rendezvous (default 127.0.0.1:0)");
  submit_->add_option("--rendezvous-advertise", rendezvous_advertise_, "host the workers reach the rendezvous at");
  submit_->add_option("--rendezvous-tls-cert", rendezvous_cert_, "serve the job's rendezvous over TLS with this PEM certificate");
  submit_->add_option("--rendezvous-tls-key", rendezvous_key_, "and this PEM key");
  submit_->add_option("--rendezvous-tls-ca", rendezvous_ca_, "the CA workers trust for it (default: the certificate itself)");
  submit_->add_option("--heartbeat-timeout", heartbeat_timeout_, "seconds an agent may not answer before the job is aborted (default 5)")
      ->check(CLI::Range(0.5, 3600.0));
  submit_->add_option("--lease", lease_, "seconds agents keep a job without a heartbeat from here (default 10)")
      ->check(CLI::Range(1.0, 86400.0));
  for (auto* cmd : {submit_, status_ = app.add_subcommand("status", "List the jobs on node agents"),
                    abort_ = app.add_subcommand("abort", "Stop a job on every node agent")}) {
    cmd->add_option("--agents", agents_, "SUB/IDX=HOST:PORT,...");
    cmd->add_option("--inventory", inventory_, "YAML file: agents: [{node: SUB/IDX, address: HOST:PORT}, ...]");
    cmd->add_option("--token-file", client_token_file_, "bearer token for the agents (and the job's rendezvous)");
    cmd->add_option("--tls-ca", client_tls_ca_, "talk TLS to the agents, trusting this CA");
    cmd->add_option("--tls-cert", client_tls_cert_, "present this PEM client certificate (to agents started with --tls-ca)");
    cmd->add_option("--tls-key", client_tls_key_, "and its PEM private key");
  }
  status_->add_option("--format", format_, "text or json")->check(CLI::IsMember({"text", "json"}));
  abort_->add_option("job", job_id_, "the job id `hetexec submit` printed")->required();
}

int ControlCommands::run() {
  if (agent_->parsed()) return run_agent();
  if (submit_->parsed()) return run_submit();
  if (status_->parsed()) return run_status();
  if (abort_->parsed()) return run_abort();
  return -1;
}

int ControlCommands::run_agent() {
  agent::Options o;
  // Before anything is created (the work directory): Agent::start checks it again.
  auto listen = input::parse_host_port(listen_, "listen", input::AnyPort::allowed);
  if (!listen) return report(listen.errors());
  o.listen = listen_;
  auto node = job::parse_node_id(node_);
  if (!node) return report(node.errors());
  o.node = *node;
  auto offer = agent::parse_devices(devices_);
  if (!offer) return report(offer.errors());
  o.offer = *offer;
  o.emulate_slowdown = slowdown_;
  if (!token_file_.empty()) {
    auto token = control::read_token_file(token_file_, control::TokenAccess::owner_only);
    if (!token) return report(token.errors());
    o.security.token = *token;
    o.worker_token_file = std::filesystem::absolute(token_file_).string();
  }
  if (!tls_cert_.empty() || !tls_key_.empty()) {
    if (tls_cert_.empty() || tls_key_.empty()) return report({{"", 0, 0, "", "TLS needs both --tls-cert and --tls-key"}});
    o.security.tls = control::ServerTls{tls_cert_, tls_key_, tls_ca_};
  } else if (!tls_ca_.empty()) {
    return report({{"", 0, 0, "", "--tls-ca needs --tls-cert and --tls-key"}});
  }
  // Whoever reaches an agent may run programs' worth of work on it: beyond this machine it
  // must authenticate its callers (a token, or client certificates) unless told otherwise.
  if (!loopback(listen->host) && o.security.token.empty() && tls_ca_.empty() && !insecure_)
    return report({{"", 0, 0, "--listen",
                    listen_ + " is reachable beyond this machine and the agent has neither --token-file nor --tls-ca "
                              "(client certificates): anyone who reaches it could run jobs; give one, or --insecure"}});
  if (workdir_.empty()) {
    std::string dir = (std::filesystem::temp_directory_path() / "hetexec-agent-XXXXXX").string();
    if (!mkdtemp(dir.data())) return report({{"", 0, 0, "", "cannot create a work directory under /tmp"}});
    workdir_ = dir;
  }
  o.workdir = workdir_;
  if (!data_root_.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(data_root_, ec)) return report({{"", 0, 0, "--data-root", data_root_ + " is not a directory"}});
    o.data_root = data_root_;
  }
  if (!checkpoint_root_.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(checkpoint_root_, ec))
      return report({{"", 0, 0, "--checkpoint-root", checkpoint_root_ + " is not a directory"}});
    o.checkpoint_root = checkpoint_root_;
  }
  o.advertise = advertise_;
  o.worker_executable = self_executable();
  o.version = version_;
  o.log = spdlog::stderr_logger_mt("agent " + o.node.to_string());
  o.log->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l agent=%n %v");
  // SIGINT/SIGTERM end the daemon cleanly: blocked here (every thread inherits the mask) and
  // taken by sigwait below.
  sigset_t stop;
  sigemptyset(&stop), sigaddset(&stop, SIGINT), sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto a = agent::Agent::start(o);
  if (!a) return report(a.errors());
  std::cout << "agent for node " << o.node.to_string() << " listening on " << (*a)->address() << std::endl;
  int sig = 0;
  sigwait(&stop, &sig);
  o.log->info("event=signal signal={}", sig);
  (*a)->stop();
  return 0;
}

int ControlCommands::run_submit() {
  InputFiles files;
  files.plan = plan_;
  if (!model_.empty()) files.model = model_;
  if (!cluster_.empty()) files.cluster = cluster_;
  auto loaded = load_plan_inputs(files);
  if (!loaded) return report(loaded.errors());
  auto agents = agents_of(agents_, inventory_);
  if (!agents) return report(agents.errors());
  if (auto listen = input::parse_host_port(rendezvous_listen_, "rendezvous-listen", input::AnyPort::allowed); !listen)
    return report(listen.errors());
  auto security = client_security(client_token_file_, client_tls_ca_, client_tls_cert_, client_tls_key_);
  if (!security) return report(security.errors());
  submit::Options o;
  o.plan = loaded->plan;
  o.plan_json = write_plan(loaded->plan);
  o.agents = *agents;
  o.security = *security;
  o.rendezvous_listen = rendezvous_listen_;
  o.rendezvous_advertise = rendezvous_advertise_;
  if (rendezvous_cert_.empty() != rendezvous_key_.empty())
    return report({{"", 0, 0, "", "the rendezvous's TLS needs both --rendezvous-tls-cert and --rendezvous-tls-key"}});
  o.rendezvous_tls_cert = rendezvous_cert_, o.rendezvous_tls_key = rendezvous_key_, o.rendezvous_tls_ca = rendezvous_ca_;
  if (settings_.checkpoint_dir.empty() != (settings_.checkpoint_every == 0) || (settings_.checkpoint_keep && settings_.checkpoint_dir.empty()))
    return report({{"", 0, 0, "", settings_.checkpoint_dir.empty() ? "--checkpoint-every and --keep need --checkpoint-dir"
                                                                    : "--checkpoint-dir needs --checkpoint-every N"}});
  o.settings = settings_;
  o.heartbeat_timeout_s = heartbeat_timeout_;
  o.heartbeat_interval_s = std::min(1.0, heartbeat_timeout_ / 3);
  o.lease_s = lease_;
  o.detach = detach_;
  std::ofstream metrics;
  if (!metrics_out_.empty()) {
    metrics.open(metrics_out_);
    if (!metrics) return report({{metrics_out_, 0, 0, "", "cannot write the file"}});
  }
  auto printer_for = [&](const Plan& plan) {
    auto [stage_of_rank, predicted_memory] = rank_memory_predictions(plan);
    StepPrinter p(metrics.is_open() ? &metrics : nullptr, plan.model.training.zero_stage >= 1);
    p.with_ranks(stage_of_rank, predicted_memory);
    return p;
  };
  StepPrinter printer = printer_for(o.plan);
  auto on_line = [&](const std::string& line) { printer(line); };
  auto on_status = [](const std::string& status) { std::cout << status << std::endl; };
  submit::Outcome outcome;
  if (elastic_) {
    if (settings_.checkpoint_dir.empty()) return report({{"", 0, 0, "--elastic", "an elastic job needs --checkpoint-dir and --checkpoint-every"}});
    if (detach_) return report({{"", 0, 0, "--elastic", "an elastic job is followed to its end: --detach does not go with it"}});
    if (!elastic_out_.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(elastic_out_, ec);
      if (ec) return report({{elastic_out_, 0, 0, "--elastic-out", "cannot create the directory: " + ec.message()}});
    }
    auto result = submit::submit_elastic(o, elastic_options_, on_line, on_status, [&](const submit::Recovery& r) {
      printer = printer_for(r.plan);
      std::cout << recovery_text(r);
    });
    if (!elastic_out_.empty()) {  // the new plans, named as recoveries.json names them
      auto write = [](const std::string& path, const std::string& text) {  // atomically, as checkpoints are
        if (auto written = checkpoint::write_file(path, text); !written) report(written.errors(), 1);
      };
      for (std::size_t k = 0; k < result.recoveries.size(); ++k)
        write(elastic_out_ + "/replan-" + std::to_string(k + 1) + ".plan.json", write_plan(result.recoveries[k].plan));
      write(elastic_out_ + "/recoveries.json", recoveries_json(result.recoveries).dump(2) + "\n");
    }
    outcome = result.last;
    if (outcome.ok && !result.recoveries.empty())
      std::cout << "elastic: " << result.recoveries.size() << " recover" << (result.recoveries.size() == 1 ? "y" : "ies") << std::endl;
  } else {
    outcome = submit::submit(o, on_line, on_status);
  }
  if (outcome.ok) {
    std::cout << (detach_ ? "job " + outcome.job_id + " runs detached; stop it with `hetexec abort " + outcome.job_id + "`"
                          : "job " + outcome.job_id + " finished")
              << std::endl;
    return 0;
  }
  std::cerr << "error: "
            << (outcome.refused ? "" : "job " + outcome.job_id + " failed (" + het::to_string(outcome.failure_kind) + "): ")
            << outcome.failure << "\n";
  return outcome.refused ? 2 : 1;
}

int ControlCommands::run_status() {
  auto agents = agents_of(agents_, inventory_);
  if (!agents) return report(agents.errors());
  auto security = client_security(client_token_file_, client_tls_ca_, client_tls_cert_, client_tls_key_);
  if (!security) return report(security.errors());
  auto rows = submit::status(*agents, *security);
  if (!rows) return report(rows.errors(), 1);
  if (format_ == "json") {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : *rows)
      out.push_back({{"node", r.node}, {"job", r.job_id}, {"state", r.state}, {"ranks", r.ranks}, {"lease_s", r.lease_seconds_left},
                     {"detail", r.detail}});
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::printf("%-12s %-18s %-10s %-6s %s\n", "node", "job", "state", "ranks", "detail");
  for (const auto& r : *rows)
    std::printf("%-12s %-18s %-10s %-6zu %s\n", r.node.c_str(), r.job_id.c_str(), r.state.c_str(), r.ranks.size(), r.detail.c_str());
  if (rows->empty()) std::printf("(no jobs)\n");
  return 0;
}

int ControlCommands::run_abort() {
  auto agents = agents_of(agents_, inventory_);
  if (!agents) return report(agents.errors());
  auto security = client_security(client_token_file_, client_tls_ca_, client_tls_cert_, client_tls_key_);
  if (!security) return report(security.errors());
  auto n = submit::abort(*agents, *security, job_id_, "hetexec abort");
  if (!n) return report(n.errors(), 1);
  std::cout << "aborted job " << job_id_ << " on " << *n << " node" << (*n == 1 ? "" : "s") << "\n";
  return *n > 0 ? 0 : 1;
}

}  // namespace het::cli
