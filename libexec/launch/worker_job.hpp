#pragma once
// What a worker (one rank of a job) is told, as data: run-local and a node agent write one job
// file per job, and every worker of it reads the file (`hetexec worker --job FILE --rank R
// [--device D]`). Nothing reaches a worker as reformatted text: numbers are written as JSON's
// shortest text that reads back as the same double (1e-07, 1.23456e-05) and read back bit for
// bit; an unknown field, a wrong type or a value out of range is an error naming the field,
// never a default (issue 18: `--lr 1e-7` once reached the ranks as `0.000000`).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "diag/diag.hpp"

namespace het::launch {

struct WorkerJob {
  // What to train: the plan, optionally with the model and cluster that replace its own, and
  // an llm.c token file (none: a synthetic stream from `seed`).
  std::string plan;
  std::optional<std::string> model, cluster, data;
  int steps = 10;          // >= 1
  std::uint64_t seed = 1;  // weights and synthetic data
  double lr = 1e-3;        // AdamW learning rate: finite, > 0

  // How each rank runs.
  std::string backend = "cpu";  // "cpu" or "cuda"
  int threads = 1;              // compute threads per rank, >= 1
  double slowdown = 1;          // a fixed compute slowdown (an agent's --emulate-slowdown), [1, 1000]
  double time_dilation = 1;     // runtime::Options::time_dilation, [1, 1000]
  bool emulate_links = false, emulate_devices = false;

  // How the ranks find each other.
  int world = 1;                              // ranks in the job, >= 1
  std::string rendezvous;                     // a directory, or grpc://HOST:PORT/JOB
  std::string host = "127.0.0.1";             // IPv4 address each rank listens on and publishes
  std::optional<std::string> token_file;      // the grpc:// rendezvous's bearer token
  std::optional<std::string> rendezvous_ca;   // talk TLS to the grpc:// rendezvous, trusting this PEM CA
  std::optional<std::string> progress_dir;    // publish progress there (progress/progress.hpp)

  // What each rank writes besides its output: PREFIX.<rank>.
  std::optional<std::string> trace_events, traffic_events;

  // Checkpoints (runtime::Options::checkpointing): written under checkpoint_dir every
  // checkpoint_every steps (>= 1 when a directory is set) and after the last, the newest
  // checkpoint_keep kept (0: all); resume: a checkpoint, or a directory of them (the newest).
  std::optional<std::string> checkpoint_dir, resume;
  int checkpoint_every = 0, checkpoint_keep = 0;
  // Elastic jobs (submit/elastic.hpp): where a rank writes what it holds when a peer is lost
  // (checkpoint::write_rescue; plans without ZeRO), and the failed job's rescue directory to
  // resume from instead of `resume` when its state is whole and newer.
  std::optional<std::string> rescue_dir, rescue_from;
  // A test's fault: rank die_rank dies halfway through writing the checkpoint of step die_step.
  std::optional<int> die_rank, die_step;

  friend bool operator==(const WorkerJob&, const WorkerJob&) = default;
};

// Every field; optional ones only when set.
nlohmann::json to_json(const WorkerJob& job);
// The job a JSON object describes; `file` names it in errors ("FILE: lr: must be finite and > 0").
Result<WorkerJob> worker_job_from_json(const nlohmann::json& j, const std::string& file);
// What is wrong with a job's values (the same checks the reader makes), empty when nothing:
// the writer refuses what a worker would refuse.
Diagnostics check(const WorkerJob& job, const std::string& file = "");

// Writes the job to `path` atomically (a temporary name, then rename): a worker never reads
// half a file. Readable by the owner only (it names the token file).
Result<Done> write_worker_job(const std::string& path, const WorkerJob& job);
// Reads a job file (a regular file, capped; input::read_file).
Result<WorkerJob> read_worker_job(const std::string& path);

}  // namespace het::launch
