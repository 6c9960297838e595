// Feeds: any bytes as a worker's job file (job.json, launch/worker_job.hpp), parsed as
// read_worker_job does (nlohmann::json, then worker_job_from_json).
// Checks: no crash, hang or unbounded memory; a refusal names the file and says why; an
// accepted job passes check() and its to_json() reads back to an equal job, every number bit
// for bit (what the agent and run-local write is what the workers run).
#include "fuzz.hpp"
#include "launch/worker_job.hpp"

using namespace het;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(fuzz::text(data, size));
  } catch (const nlohmann::json::parse_error&) {
    return 0;  // read_worker_job refuses it as "not JSON"
  }
  auto job = launch::worker_job_from_json(j, "job.json");
  if (!job) {
    fuzz::require_explained(job.errors(), "job.json");
    return 0;
  }
  fuzz::require(launch::check(*job).empty(), "an accepted job passes check()");
  const std::string written = launch::to_json(*job).dump();
  auto again = launch::worker_job_from_json(nlohmann::json::parse(written), "job.json");
  fuzz::require(again.ok() && *again == *job, "to_json(job) reads back to the same job", written);
  return 0;
}
