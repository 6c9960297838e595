#pragma once
// The control-plane commands of hetexec (agent, submit, status, abort), registered on the
// CLI app; run() runs the one that was parsed.
#include <string>

#include <CLI/CLI.hpp>

#include "submit/elastic.hpp"
#include "submit/submit.hpp"

namespace het::cli {

class ControlCommands {
 public:
  ControlCommands(CLI::App& app, std::string version);
  // The exit status of the parsed command, or -1 when none of these was parsed.
  int run();

 private:
  int run_agent();
  int run_submit();
  int run_status();
  int run_abort();
  std::string version_;
  CLI::App *agent_, *submit_, *status_, *abort_;
  // agent
  std::string listen_, node_, devices_, token_file_, tls_cert_, tls_key_, tls_ca_, workdir_, advertise_ = "127.0.0.1";
  double slowdown_ = 1;
  // submit, status, abort
  std::string plan_, model_, cluster_, metrics_out_, agents_, inventory_, client_token_file_, client_tls_ca_;
  std::string rendezvous_listen_ = "127.0.0.1:0", rendezvous_advertise_, format_ = "text", job_id_;
  std::string rendezvous_cert_, rendezvous_key_, rendezvous_ca_;
  std::string data_root_, checkpoint_root_, client_tls_cert_, client_tls_key_;
  bool insecure_ = false;
  submit::Settings settings_;
  bool detach_ = false, elastic_ = false;
  std::string elastic_out_;
  submit::ElasticOptions elastic_options_;
  double heartbeat_timeout_ = 5, lease_ = 10;
};

}  // namespace het::cli
