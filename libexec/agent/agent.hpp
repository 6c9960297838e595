#pragma once
// `hetexec agent` (DESIGN.md §9): the daemon on one node that runs its share of jobs. It serves
// het.v1.Agent (proto/hetexec.proto): Describe answers the node and its devices; Prepare checks a
// job (the plan validates and this runtime runs it; the ranks are exactly the plan's ranks on
// this node; the devices exist, are free and match the plan; the settings are in range) and
// reserves its devices, writing what its workers are told to the job's job.json (launch/
// worker_job.hpp); Start spawns one worker per rank — this hetexec binary's `worker --job` —
// from a thread that lives as long as they do; Events streams the workers' lines and exits;
// Abort, a worker that fails, or a lease that runs out without a Heartbeat stop every worker
// of the job (SIGTERM, then SIGKILL). Every call is
// admitted first (token, API version; control/admission.hpp). Bad requests get an error
// status or a PrepareResponse saying why; nothing a client sends can stop the daemon.
#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "control/credentials.hpp"
#include "diag/diag.hpp"
#include "job/placement.hpp"

namespace het::agent {

// --devices: "cpu:N" (N worker slots on the CPU backend), "cuda:all" or "cuda:N" (this node's
// CUDA GPUs, as discovered).
Result<job::Offer> parse_devices(const std::string& spec);

struct Options {
  std::string listen = "127.0.0.1:0";
  job::NodeId node;
  job::Offer offer;
  double emulate_slowdown = 1;         // every worker's compute stretched by this (>= 1)
  control::ServerSecurity security;
  std::string worker_token_file;       // handed to workers for the job's rendezvous; empty: none
  std::string advertise = "127.0.0.1"; // IPv4 address the workers listen on for their peers
  std::string workdir;                 // job files go to workdir/<job id>/
  // A job's data file (settings.data_path) must resolve, symlinks followed, to a regular file
  // under this directory; a relative path is taken from it. Empty: any file the agent can read.
  std::string data_root;
  // A job's checkpoint_dir and resume (JobSettings) must lie under this directory; a relative
  // path is taken from it. Empty: the agent refuses checkpoints.
  std::string checkpoint_root;
  std::string worker_executable;       // the hetexec binary
  std::string version;
  std::shared_ptr<spdlog::logger> log; // structured log lines; null: spdlog's default logger
  int max_finished_jobs = 16;          // finished jobs kept for Describe
};

class Agent {
 public:
  static Result<std::unique_ptr<Agent>> start(const Options& options);
  ~Agent();  // stop()
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int port() const;
  std::string address() const;  // HOST:PORT it listens on
  // Blocks until stop().
  void wait();
  // Stops every job's workers and the server. Safe from any thread, more than once.
  void stop();

 private:
  struct State;
  explicit Agent(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace het::agent
