// fuzz_seeds OUTDIR: writes the seeds that are not shipped as files, with the project's own
// writers, for scripts/fuzz.sh: OUTDIR/agent/ (a call-sequence byte and a PrepareRequest, as
// the agent harness reads its input, for each test plan that loads with tiny-gpt on the
// demo cluster, naming its ranks on node a100/0), OUTDIR/worker_job/ (job files as run-local
// and the agent write them) and OUTDIR/checkpoint/ (checkpoint_base.hpp's files).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "checkpoint_base.hpp"
#include "control/admission.hpp"
#include "hetexec.grpc.pb.h"
#include "job/placement.hpp"
#include "launch/worker_job.hpp"
#include "plan/plan_io.hpp"
#include "validation/inputs.hpp"

using namespace het;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& bytes) { std::ofstream(file, std::ios::binary) << bytes; }

int agent_seeds(const fs::path& out) {
  fs::create_directories(out);
  const auto node = *job::parse_node_id("a100/0");
  int n = 0;
  std::vector<fs::path> plans;
  for (const auto& e : fs::directory_iterator(HET_SOURCE_DIR "/tests/data/plans")) plans.push_back(e.path());
  std::sort(plans.begin(), plans.end());
  for (const auto& file : plans) {
    InputFiles files;
    files.plan = file.string();
    files.model = HET_SOURCE_DIR "/configs/models/tiny-gpt.yaml";
    files.cluster = HET_SOURCE_DIR "/configs/clusters/demo-1x4a100-1x4v100.yaml";
    auto loaded = load_plan_inputs(files);
    if (!loaded) continue;
    const auto ranks = job::ranks_on(loaded->plan, node);
    if (ranks.empty()) continue;
    v1::PrepareRequest p;
    p.set_api_version(control::api_version());
    p.set_job_id("seed-" + file.stem().stem().string());
    p.set_plan_json(write_plan(loaded->plan));
    for (const auto& r : ranks) p.add_ranks(std::uint32_t(r.rank));
    p.mutable_settings()->set_steps(1);
    p.mutable_settings()->set_learning_rate(1e-3);
    p.set_rendezvous_address("127.0.0.1:1");
    p.set_lease_seconds(60);
    // Prepare alone; then a heartbeat; a start; an abort (the harness's first byte).
    for (char then : {0, 1, 2, 4}) write(out / (p.job_id() + "-" + std::to_string(int(then)) + ".bin"), then + p.SerializeAsString());
    ++n;
  }
  if (n == 0) {
    std::cerr << "fuzz_seeds: no test plan loaded for the agent seeds\n";
    return 1;
  }
  return 0;
}

void worker_job_seeds(const fs::path& out) {
  fs::create_directories(out);
  launch::WorkerJob w;
  w.plan = "/tmp/job/plan.json";
  w.rendezvous = "/tmp/job/rendezvous";
  write(out / "plain.json", launch::to_json(w).dump(1));
  w.model = "model.yaml", w.cluster = "cluster.yaml", w.data = "tokens.bin";
  w.steps = 1000, w.seed = 18446744073709551615ull, w.lr = 1.23456e-5, w.threads = 8;
  w.slowdown = 2.5, w.time_dilation = 10, w.emulate_links = w.emulate_devices = true;
  w.world = 16, w.rendezvous = "grpc://127.0.0.1:5000/job-1", w.host = "10.0.0.1";
  w.token_file = "token", w.rendezvous_ca = "ca.pem", w.progress_dir = "progress";
  w.trace_events = "trace", w.traffic_events = "traffic";
  write(out / "every-field.json", launch::to_json(w).dump(1));
  w.backend = "cuda", w.lr = 1e-7;
  write(out / "cuda.json", launch::to_json(w).dump());
}

}  // namespace

// The checkpoint harness's: each file of the base checkpoint after the byte that picks it.
int checkpoint_seeds(const fs::path& out) {
  fs::create_directories(out);
  const std::string dir = fuzz::write_base_checkpoint((out / "base").string());
  if (dir.empty()) return 1;
  for (std::size_t i = 0; i < fuzz::kCheckpointFiles.size(); ++i) {
    std::ifstream in(dir + "/" + fuzz::kCheckpointFiles[i], std::ios::binary);
    write(out / (std::to_string(i) + "-" + fuzz::kCheckpointFiles[i]), char(i) + std::string(std::istreambuf_iterator<char>(in), {}));
  }
  fs::remove_all(out / "base");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds OUTDIR\n";
    return 2;
  }
  worker_job_seeds(fs::path(argv[1]) / "worker_job");
  if (checkpoint_seeds(fs::path(argv[1]) / "checkpoint") != 0) return 1;
  return agent_seeds(fs::path(argv[1]) / "agent");
}
