// Feeds: any bytes as a call sequence to a node agent's gRPC service (het.v1.Agent, proto/
// hetexec.proto). One in-process agent (node a100/0 offering cpu:4, no token, a per-process
// workdir, workers that are /bin/true) is started at the first input and kept: the harness's
// only global state, as libFuzzer runs every input in one process. Per input, the first byte
// chooses the follow-up calls and the rest is parsed as a PrepareRequest, which is sent; its job
// id then gets a Heartbeat (bit 0), a Start (bit 1; its workers exit at once), an Abort (bit 2),
// and, when it started or was aborted, an Events stream to the end; an Abort always ends the
// job, so that the next input finds the agent's devices free.
// Checks: no crash, hang or unbounded memory in the agent; every call ends with a status a
// client can act on (never UNKNOWN, INTERNAL, UNAVAILABLE or a deadline: no handler throws or
// stalls); a prepared job's events end with JobFinished; and the agent still answers Describe
// after every input.
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <grpcpp/grpcpp.h>
#include <spdlog/logger.h>

#include "agent/agent.hpp"
#include "control/admission.hpp"
#include "fuzz.hpp"
#include "hetexec.grpc.pb.h"

using namespace het;
namespace pb = het::v1;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path workdir;
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<pb::Agent::Stub> stub;

  Fixture() {
    workdir = fs::temp_directory_path() / ("het-fuzz-agent." + std::to_string(::getpid()));
    agent::Options o;
    o.node = *job::parse_node_id("a100/0");
    o.offer = *agent::parse_devices("cpu:4");
    o.workdir = workdir.string();
    o.worker_executable = "/bin/true";
    o.version = "fuzz";
    o.log = std::make_shared<spdlog::logger>("quiet");  // no sinks: millions of refusals
    auto a = agent::Agent::start(o);
    fuzz::require(a.ok(), "the agent starts", a ? "" : to_string(a.errors()));
    agent = std::move(*a);
    stub = pb::Agent::NewStub(grpc::CreateChannel(agent->address(), grpc::InsecureChannelCredentials()));
  }
  ~Fixture() {
    stub.reset();
    agent.reset();
    std::error_code ec;
    fs::remove_all(workdir, ec);
  }
  static Fixture& get() {
    static Fixture f;
    return f;
  }
};

std::unique_ptr<grpc::ClientContext> context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return c;
}

// A status a client acts on: OK or a refusal, not a failure of the server.
void require_answered(const grpc::Status& s, const char* call) {
  const auto code = s.error_code();
  fuzz::require(code != grpc::StatusCode::UNKNOWN && code != grpc::StatusCode::INTERNAL &&
                    code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED,
                call, std::to_string(int(code)) + ": " + s.error_message());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Fixture& f = Fixture::get();
  const std::uint8_t then = data[0];
  pb::PrepareRequest prepare;
  if (!prepare.ParseFromArray(data + 1, int(size - 1))) return 0;  // no client can send it
  pb::PrepareResponse prepared;
  require_answered(f.stub->Prepare(context().get(), prepare, &prepared), "Prepare answers");
  const std::string& id = prepare.job_id();
  const std::uint32_t version = control::api_version();
  bool ended = false;
  if (then & 1) {
    pb::HeartbeatRequest h;
    h.set_api_version(version), h.set_job_id(id);
    pb::HeartbeatResponse r;
    require_answered(f.stub->Heartbeat(context().get(), h, &r), "Heartbeat answers");
  }
  if (then & 2) {
    pb::StartRequest s;
    s.set_api_version(version), s.set_job_id(id);
    pb::StartResponse r;
    const auto status = f.stub->Start(context().get(), s, &r);
    require_answered(status, "Start answers");
    ended = ended || (prepared.ok() && status.ok());
  }
  if (then & 4) {
    pb::AbortRequest a;
    a.set_api_version(version), a.set_job_id(id), a.set_reason("fuzz");
    pb::AbortResponse r;
    require_answered(f.stub->Abort(context().get(), a, &r), "Abort answers");
    ended = ended || prepared.ok();
  }
  if (ended) {  // the job's events run to JobFinished
    pb::EventsRequest e;
    e.set_api_version(version), e.set_job_id(id);
    auto c = context();
    auto reader = f.stub->Events(c.get(), e);
    pb::Event event;
    bool finished = false;
    while (reader->Read(&event)) finished = finished || event.has_finished();
    const auto status = reader->Finish();
    require_answered(status, "Events answers");
    fuzz::require(!status.ok() || finished, "a prepared job's events end with JobFinished");
  }
  if (prepared.ok()) {  // free the devices for the next input
    pb::AbortRequest a;
    a.set_api_version(version), a.set_job_id(id);
    pb::AbortResponse r;
    require_answered(f.stub->Abort(context().get(), a, &r), "Abort answers");
  }
  pb::DescribeRequest d;
  d.set_api_version(version);
  pb::DescribeResponse described;
  const auto status = f.stub->Describe(context().get(), d, &described);
  fuzz::require(status.ok(), "the agent answers Describe after every input", status.error_message());
  return 0;
}
