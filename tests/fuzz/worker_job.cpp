// Feeds: any bytes as a worker's job file (job.json, launch/worker_job.hpp), written to a
// per-process temporary file (removed at exit) and read with read_worker_job, as a worker reads
// it.
// Checks: no crash, hang or unbounded memory; a refusal names the file and says why; an
// accepted job passes check() and its to_json() reads back to an equal job, every number bit
// for bit (what the agent and run-local write is what the workers run).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fuzz.hpp"
#include "launch/worker_job.hpp"

using namespace het;

namespace {
// The file every input is written to, removed at exit.
struct JobFile {
  std::string path = (std::filesystem::temp_directory_path() / ("het-fuzz-job." + std::to_string(::getpid()) + ".json")).string();
  ~JobFile() { std::filesystem::remove(path); }
};
const std::string& job_file() {
  static const JobFile file;
  return file.path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::ofstream(job_file(), std::ios::binary | std::ios::trunc) << fuzz::text(data, size);
  auto job = launch::read_worker_job(job_file());
  if (!job) {
    fuzz::require_explained(job.errors(), job_file());
    return 0;
  }
  fuzz::require(launch::check(*job).empty(), "an accepted job passes check()");
  const std::string written = launch::to_json(*job).dump();
  auto again = launch::worker_job_from_json(nlohmann::json::parse(written), job_file());
  fuzz::require(again.ok() && *again == *job, "to_json(job) reads back to the same job", written);
  return 0;
}
