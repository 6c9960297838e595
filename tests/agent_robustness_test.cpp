// An agent under hostile traffic: garbage bytes on its port, other API versions, no token,
// unknown and invalid job ids, malformed, deeply nested and oversized plans, concurrent
// prepares of the same devices — and afterwards it still runs a job correctly.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/logger.h>

#include "agent/agent.hpp"
#include "control/admission.hpp"
#include "hetexec.grpc.pb.h"
#include "launch/worker_job.hpp"
#include "plan/plan_io.hpp"
#include "kept_plans.hpp"
#include "process.hpp"
#include "submit/submit.hpp"
#include "test_util.hpp"

using namespace het;
namespace pb = het::v1;

namespace {

struct Client {
  std::unique_ptr<pb::Agent::Stub> stub;
  std::string token;
  explicit Client(const std::string& address, std::string t) : token(std::move(t)) {
    stub = pb::Agent::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<grpc::ClientContext> ctx(double timeout_s = 10) const {
    auto c = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) c->AddMetadata("authorization", "Bearer " + token);
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(int(timeout_s * 1000)));
    return c;
  }
};

// Sends `bytes` to the port and closes the connection.
void send_garbage(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(std::uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::close(fd);
}

}  // namespace

TEST_CASE("an agent survives 1,000+ malformed and hostile requests and then runs a job correctly") {
  test::TempDir dir;
  const std::string token_file = dir.write("token", "robust-token");
  auto start_agent = [&](const char* node, const char* devices) {
    agent::Options o;
    o.node = *job::parse_node_id(node);
    o.offer = *agent::parse_devices(devices);
    o.security.token = "robust-token";
    o.worker_token_file = token_file;
    o.workdir = dir.path() + "/" + std::string(node).replace(4, 1, "-");
    o.worker_executable = HETEXEC_BIN;
    o.version = "test";
    o.log = std::make_shared<spdlog::logger>("quiet");  // no sinks: 1,000 refusals are not worth reading
    auto a = agent::Agent::start(o);
    REQUIRE(a.ok());
    return std::move(*a);
  };
  auto a100 = start_agent("a100/0", "cpu:4");
  auto v100 = start_agent("v100/0", "cpu:1");
  const Plan plan = test::mixed_plan();
  const std::string plan_json = write_plan(plan);
  test::keep_plan(plan_json);
  Client ok(a100->address(), "robust-token"), anonymous(a100->address(), "");
  std::atomic<int> requests{0};
  std::mt19937 rng(7);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = char(rng() & 0xff);
    return s;
  };

  // 1. Garbage on the port: random bytes, an HTTP/2 preface followed by junk, plain HTTP.
  for (int i = 0; i < 200; ++i, ++requests) {
    std::string junk = random_bytes(std::size_t(1 + rng() % 65536));
    if (i % 3 == 1) junk = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + junk;
    if (i % 3 == 2) junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_garbage(a100->port(), junk);
  }
  // 2. Other API versions on every call.
  for (int i = 0; i < 40; ++i) {
    const std::uint32_t v = i % 2 ? 0 : 2 + std::uint32_t(rng() % 1000);
    pb::DescribeRequest d;
    d.set_api_version(v);
    pb::DescribeResponse dr;
    CHECK(ok.stub->Describe(ok.ctx().get(), d, &dr).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    pb::PrepareRequest p;
    p.set_api_version(v), p.set_job_id("j"), p.set_plan_json(plan_json);
    pb::PrepareResponse pr;
    CHECK(ok.stub->Prepare(ok.ctx().get(), p, &pr).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    pb::StartRequest s;
    s.set_api_version(v), s.set_job_id("j");
    pb::StartResponse sr;
    CHECK(ok.stub->Start(ok.ctx().get(), s, &sr).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    pb::HeartbeatRequest h;
    h.set_api_version(v), h.set_job_id("j");
    pb::HeartbeatResponse hr;
    CHECK(ok.stub->Heartbeat(ok.ctx().get(), h, &hr).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    pb::EventsRequest e;
    e.set_api_version(v), e.set_job_id("j");
    auto c = ok.ctx();
    auto reader = ok.stub->Events(c.get(), e);
    pb::Event ev;
    while (reader->Read(&ev)) {}
    CHECK(reader->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    requests += 5;
  }
  // 3. No token, or a wrong one.
  Client wrong(a100->address(), "robust-tokem");
  for (int i = 0; i < 100; ++i, ++requests) {
    pb::DescribeRequest d;
    d.set_api_version(control::api_version());
    pb::DescribeResponse dr;
    const Client& c = i % 2 ? anonymous : wrong;
    CHECK(c.stub->Describe(c.ctx().get(), d, &dr).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  // 4. Unknown and invalid job ids.
  for (int i = 0; i < 50; ++i) {
    const std::string id = "nope-" + std::to_string(i);
    pb::StartRequest s;
    s.set_api_version(control::api_version()), s.set_job_id(id);
    pb::StartResponse sr;
    CHECK(ok.stub->Start(ok.ctx().get(), s, &sr).error_code() == grpc::StatusCode::NOT_FOUND);
    pb::AbortRequest a;
    a.set_api_version(control::api_version()), a.set_job_id(id), a.set_reason(std::string(100000, 'r'));
    pb::AbortResponse ar;
    CHECK(ok.stub->Abort(ok.ctx().get(), a, &ar).error_code() == grpc::StatusCode::NOT_FOUND);
    pb::HeartbeatRequest h;
    h.set_api_version(control::api_version()), h.set_job_id(id);
    pb::HeartbeatResponse hr;
    CHECK(ok.stub->Heartbeat(ok.ctx().get(), h, &hr).error_code() == grpc::StatusCode::NOT_FOUND);
    pb::PrepareRequest p;
    p.set_api_version(control::api_version());
    p.set_job_id(i % 3 == 0 ? std::string(500, 'x') : i % 3 == 1 ? "../../etc" : "");
    pb::PrepareResponse pr;
    CHECK(ok.stub->Prepare(ok.ctx().get(), p, &pr).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    requests += 4;
  }
  // 5. Plans that are garbage, deeply nested, wrong for this node, or too large.
  auto prepare = [&](const std::string& id, const std::string& text, std::vector<std::uint32_t> ranks) {
    pb::PrepareRequest p;
    p.set_api_version(control::api_version()), p.set_job_id(id), p.set_plan_json(text);
    for (auto r : ranks) p.add_ranks(r);
    p.mutable_settings()->set_steps(3), p.mutable_settings()->set_learning_rate(1e-3);
    p.set_rendezvous_address("127.0.0.1:1");
    p.set_lease_seconds(5);
    pb::PrepareResponse pr;
    auto st = ok.stub->Prepare(ok.ctx(30).get(), p, &pr);
    ++requests;
    return std::pair{st, pr};
  };
  for (int i = 0; i < 100; ++i) {
    std::string text = i % 4 == 0 ? random_bytes(1000) : i % 4 == 1 ? std::string(100000, '[') : i % 4 == 2 ? "{\"format\": 5}" : plan_json;
    std::vector<std::uint32_t> ranks = i % 4 == 3 ? std::vector<std::uint32_t>{0, 1} : std::vector<std::uint32_t>{0, 1, 2, 3};
    auto [st, pr] = prepare("bad-" + std::to_string(i), text, ranks);
    if (i % 4 == 0) {  // not UTF-8: gRPC refuses the message itself
      CHECK_FALSE((st.ok() && pr.ok()));
      continue;
    }
    CHECK(st.ok());
    CHECK_FALSE(pr.ok());
    CHECK_FALSE(pr.error().empty());
  }
  for (int i = 0; i < 5; ++i) {
    auto [st, pr] = prepare("huge-" + std::to_string(i), std::string(20 << 20, ' '), {0});
    CHECK(st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // 6. Concurrent prepares of the same devices: exactly one wins; then it is aborted.
  std::atomic<int> won{0};
  std::string winner;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 25; ++k) {
        const std::string id = "race-" + std::to_string(t) + "-" + std::to_string(k);
        auto [st, pr] = prepare(id, plan_json, {0, 1, 2, 3});
        if (st.ok() && pr.ok()) {
          ++won;
          std::lock_guard lock(mu);
          winner = id;
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(won == 1);
  {
    pb::AbortRequest a;
    a.set_api_version(control::api_version()), a.set_job_id(winner);
    pb::AbortResponse ar;
    CHECK(ok.stub->Abort(ok.ctx().get(), a, &ar).ok());
    // Abort forgets the job (the proto's word): its id and devices are free again.
    auto [st, pr] = prepare(winner, plan_json, {0, 1, 2, 3});
    CHECK(st.ok());
    CHECK(pr.ok());
    INFO(pr.error());
    CHECK(ok.stub->Abort(ok.ctx().get(), a, &ar).ok());
  }
  INFO(requests << " hostile requests");
  CHECK(requests >= 1000);

  // And now a job, with everything in order.
  submit::Options o;
  o.plan = plan;
  o.plan_json = plan_json;
  o.agents = {{*job::parse_node_id("a100/0"), a100->address(), std::nullopt}, {*job::parse_node_id("v100/0"), v100->address(), std::nullopt}};
  o.security.token = "robust-token";
  o.settings.steps = 3;
  std::vector<std::string> lines;
  auto outcome = submit::submit(o, [&](const std::string& line) { lines.push_back(line); }, {});
  INFO(outcome.failure);
  CHECK(outcome.ok);
  int steps = 0;
  for (const auto& l : lines) steps += l.find("\"step\"") != std::string::npos;
  CHECK(steps == 3);
}

// Issue 18: a data path with an embedded NUL was accepted (the check saw the part before it),
// and any file the agent could read could be named.
TEST_CASE("an agent reads only the data files it may: no NUL, regular files, under its --data-root, and its workers get the job as data") {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/data");
  const std::string tokens = dir.write("data/tokens.bin", "not read at prepare");
  dir.write("outside.bin", "secret");
  std::filesystem::create_symlink(dir.path() + "/outside.bin", dir.path() + "/data/escape.bin");
  agent::Options o;
  o.node = *job::parse_node_id("v100/0");
  o.offer = *agent::parse_devices("cpu:1");
  o.workdir = dir.path() + "/work";
  o.data_root = dir.path() + "/data";
  o.worker_executable = HETEXEC_BIN;
  o.version = "test";
  o.log = std::make_shared<spdlog::logger>("quiet");
  auto a = agent::Agent::start(o);
  REQUIRE(a.ok());
  Client c((*a)->address(), "");
  const std::string plan_json = write_plan(test::mixed_plan());
  auto prepare = [&](const std::string& id, const std::string& data) {
    pb::PrepareRequest p;
    p.set_api_version(control::api_version()), p.set_job_id(id), p.set_plan_json(plan_json);
    p.add_ranks(4);  // the mixed plan's rank on v100/0
    p.mutable_settings()->set_steps(3), p.mutable_settings()->set_learning_rate(1.23456e-5);
    p.mutable_settings()->set_data_path(data);
    p.set_rendezvous_address("127.0.0.1:1");
    pb::PrepareResponse pr;
    REQUIRE(c.stub->Prepare(c.ctx(30).get(), p, &pr).ok());
    if (pr.ok()) {  // free the device for the next
      pb::AbortRequest ab;
      ab.set_api_version(control::api_version()), ab.set_job_id(id);
      pb::AbortResponse ar;
      CHECK(c.stub->Abort(c.ctx().get(), ab, &ar).ok());
    }
    return pr;
  };
  for (const std::string& path : {tokens, std::string("tokens.bin")}) {
    INFO(path);
    const auto pr = prepare("ok", path);
    INFO(pr.error());
    CHECK(pr.ok());
  }
  struct Refused {
    std::string path, why;
  };
  for (const auto& [path, why] : {Refused{tokens + std::string("\0/../../outside.bin", 19), "contains a NUL byte"},
                                  Refused{dir.path() + "/outside.bin", "is not under node v100/0's data root"},
                                  Refused{"../outside.bin", "is not under node v100/0's data root"},
                                  Refused{"escape.bin", "is not under node v100/0's data root"},  // a symlink out of it
                                  Refused{"/dev/zero", "no such file on node v100/0"},
                                  Refused{"missing.bin", "no such file on node v100/0"}}) {
    INFO(path);
    const auto pr = prepare("refused", path);
    CHECK_FALSE(pr.ok());
    CHECK_THAT(pr.error(), Catch::Contains(why));
  }
  // What the workers of a prepared job are told: the data file resolved, the rate bit for bit.
  pb::PrepareRequest p;
  p.set_api_version(control::api_version()), p.set_job_id("kept"), p.set_plan_json(plan_json), p.add_ranks(4);
  p.mutable_settings()->set_steps(3), p.mutable_settings()->set_learning_rate(1.23456e-5);
  p.mutable_settings()->set_data_path("tokens.bin");
  p.set_rendezvous_address("127.0.0.1:1");
  pb::PrepareResponse pr;
  REQUIRE(c.stub->Prepare(c.ctx(30).get(), p, &pr).ok());
  REQUIRE(pr.ok());
  auto w = launch::read_worker_job(dir.path() + "/work/kept/job.json");
  REQUIRE(w);
  CHECK(w->lr == 1.23456e-5);
  CHECK(w->data == std::filesystem::canonical(tokens).string());
  CHECK(w->world == 5);
  CHECK(w->rendezvous == "grpc://127.0.0.1:1/kept");
}

TEST_CASE("an agent runs another node of a re-planned plan (plan_node) on the devices its device_map names, and refuses bad maps") {
  test::TempDir dir;
  agent::Options o;
  o.node = *job::parse_node_id("v100/1");  // the agent of v100/1 runs the plan's v100/0
  o.offer = *agent::parse_devices("cpu:2");
  o.workdir = dir.path() + "/work";
  o.worker_executable = HETEXEC_BIN;
  o.version = "test";
  o.log = std::make_shared<spdlog::logger>("quiet");
  auto a = agent::Agent::start(o);
  REQUIRE(a.ok());
  Client c((*a)->address(), "");
  const std::string plan_json = write_plan(test::mixed_plan());
  auto prepare = [&](const std::string& id, const std::string& node, std::vector<std::uint32_t> map) {
    pb::PrepareRequest p;
    p.set_api_version(control::api_version()), p.set_job_id(id), p.set_plan_json(plan_json);
    p.add_ranks(4);  // the mixed plan's rank on v100/0, on its device 0
    p.mutable_settings()->set_steps(3), p.mutable_settings()->set_learning_rate(1e-3);
    p.set_rendezvous_address("127.0.0.1:1");
    p.set_plan_node(node);
    for (auto d : map) p.add_device_map(d);
    pb::PrepareResponse pr;
    REQUIRE(c.stub->Prepare(c.ctx(30).get(), p, &pr).ok());
    return pr;
  };
  // Without plan_node the agent is v100/1, where the plan runs nothing.
  CHECK_THAT(prepare("own", "", {}).error(), Catch::Contains("the plan runs ranks [] on node v100/1"));
  CHECK_THAT(prepare("bad-node", "v100", {}).error(), Catch::Contains("plan_node"));
  CHECK_THAT(prepare("twice", "v100/0", {1, 1}).error(), Catch::Contains("device_map names a device twice"));
  CHECK_THAT(prepare("beyond", "v100/0", {7}).error(), Catch::Contains("device_map names device 7, the agent has 2"));
  // The plan's device 0 as the agent's device 1, then as its device 0: two jobs side by side,
  // which the same device would refuse.
  auto on1 = prepare("on-1", "v100/0", {1});
  INFO(on1.error());
  REQUIRE(on1.ok());
  CHECK_THAT(prepare("on-1-again", "v100/0", {1}).error(), Catch::Contains("device 1 of node v100/1 is busy"));
  auto on0 = prepare("on-0", "v100/0", {0});
  INFO(on0.error());
  CHECK(on0.ok());
}
