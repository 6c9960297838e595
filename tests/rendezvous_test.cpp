// A job's rendezvous: the store, the gRPC server and client on real loopback ports, the
// shared-directory rendezvous, and TCP peers meeting through the gRPC one.
#include <catch2/catch.hpp>

#include <grpcpp/create_channel.h>

#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "error_text.hpp"
#include "hetexec.grpc.pb.h"
#include "process.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/directory.hpp"
#include "rendezvous/open.hpp"
#include "rendezvous/server.hpp"
#include "rendezvous/store.hpp"
#include "transport/tcp.hpp"

using het::rendezvous::RendezvousClient;
using het::rendezvous::RendezvousServer;
using Code = het::rendezvous::StoreStatus::Code;

namespace {

std::unique_ptr<RendezvousServer> start_server(het::rendezvous::ServerOptions options = {}) {
  auto server = RendezvousServer::start(options);
  INFO((server ? "" : het::to_string(server.errors())));
  REQUIRE(server.ok());
  return std::move(*server);
}

RendezvousClient client_of(const RendezvousServer& server, const std::string& token = "", double call_timeout_s = 10) {
  auto client = RendezvousClient::open(server.address(), {std::nullopt, token}, call_timeout_s);
  REQUIRE(client.ok());
  return std::move(*client);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("rendezvous store: put, get, overwrite, invalid names, and the limits per value and per job") {
  het::rendezvous::Store store;
  CHECK(store.limits().max_value_bytes == 1u << 20);  // the documented defaults
  CHECK(store.limits().max_keys_per_job == 100000u);
  std::string value;
  CHECK(store.get("job", "k", &value).code == Code::not_found);
  REQUIRE(store.put("job", "k", "one").ok());
  REQUIRE(store.put("job", "k", "two").ok());  // the last value wins
  REQUIRE(store.get("job", "k", &value).ok());
  CHECK(value == "two");
  CHECK(store.get("other-job", "k", &value).code == Code::not_found);  // jobs do not share keys

  for (const char* bad : {"", ".hidden", "a/b", "a b", "ключ"}) {
    INFO("name '" << bad << "'");
    CHECK(store.put("job", bad, "x").code == Code::invalid);
    CHECK(store.put(bad, "k", "x").code == Code::invalid);
  }
  CHECK(store.put("job", std::string(129, 'k'), "x").code == Code::invalid);
  CHECK(store.put("job", std::string(128, 'k'), "x").ok());

  CHECK(store.put("job", "big", std::string(1 << 20, 'x')).ok());
  auto too_large = store.put("job", "bigger", std::string((1 << 20) + 1, 'x'));
  CHECK(too_large.code == Code::too_large);
  CHECK_THAT(too_large.message, Catch::Contains("1048577 bytes; at most 1048576"));

  het::rendezvous::Store keys;
  for (int i = 0; i < 100000; ++i) REQUIRE(keys.put("job", "k" + std::to_string(i), "v").ok());
  auto full = keys.put("job", "one-more", "v");
  CHECK(full.code == Code::full);
  CHECK_THAT(full.message, Catch::Contains("100000 keys"));
  CHECK(keys.put("job", "k7", "new value").ok());  // replacing a key adds none
  CHECK(keys.put("another-job", "k", "v").ok());
  keys.drop("job");
  CHECK(keys.put("job", "one-more", "v").ok());

  het::rendezvous::Limits small;
  small.max_bytes_per_job = 100;
  small.max_jobs = 2;
  het::rendezvous::Store bounded(small);
  CHECK(bounded.put("a", "k", std::string(90, 'x')).ok());
  CHECK(bounded.put("a", "k2", std::string(20, 'x')).code == Code::full);  // bytes per job
  CHECK(bounded.put("a", "k", std::string(95, 'x')).ok());                 // replacing frees the old bytes
  CHECK(bounded.put("b", "k", "v").ok());
  CHECK(bounded.put("c", "k", "v").code == Code::full);  // jobs
}

TEST_CASE("rendezvous store: a wait needs a timeout in range, times out, and is woken by close") {
  het::rendezvous::Store store;
  std::string value;
  CHECK(store.wait("job", "k", 0, &value).code == Code::invalid);
  CHECK(store.wait("job", "k", 3601, &value).code == Code::invalid);
  const auto t0 = std::chrono::steady_clock::now();
  auto late = store.wait("job", "k", 0.2, &value);
  CHECK(late.code == Code::timed_out);
  CHECK(seconds_since(t0) >= 0.19);
  CHECK(store.wait("job", "k", 10, &value, [] { return true; }).code == Code::cancelled);

  auto waiting = std::async(std::launch::async, [&] {
    std::string v;
    return store.wait("job", "k", 30, &v).code;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  store.close();
  REQUIRE(waiting.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(waiting.get() == Code::closed);
  CHECK(store.put("job", "k", "v").code == Code::closed);
}

TEST_CASE("rendezvous server: put then get, get of an absent key is NOT_FOUND, wait answers at once when the key exists") {
  auto server = start_server();
  CHECK(server->port() > 0);
  auto client = client_of(*server);
  auto absent = client.get("job-1", "nccl.id");
  REQUIRE(absent.ok());
  CHECK_FALSE(absent->has_value());
  const std::string id("\x00\x01\xff binary", 10);  // values are bytes
  REQUIRE(client.put("job-1", "nccl.id", id).ok());
  auto got = client.get("job-1", "nccl.id");
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(**got == id);
  auto waited = client.wait("job-1", "nccl.id", 5);
  REQUIRE(waited.ok());
  CHECK(*waited == id);

  // The gRPC code itself, through the generated stub.
  auto stub = het::v1::Rendezvous::NewStub(grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  het::v1::GetRequest request;
  request.set_api_version(het::v1::API_VERSION_CURRENT);
  request.set_job_id("job-1");
  request.set_key("missing");
  het::v1::GetResponse response;
  grpc::ClientContext context;
  CHECK(stub->Get(&context, request, &response).error_code() == grpc::StatusCode::NOT_FOUND);

  auto invalid = client.put("job-1", "no/slashes", "x");
  REQUIRE_FALSE(invalid.ok());
  CHECK_THAT(het::to_string(invalid.errors()), Catch::Contains("INVALID_ARGUMENT: invalid key 'no/slashes'"));
}

TEST_CASE("rendezvous server: a wait for a key nobody puts ends with DEADLINE_EXCEEDED at its timeout") {
  auto server = start_server();
  auto client = client_of(*server);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client.wait("job", "never", 0.3);
  const double took = seconds_since(t0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("DEADLINE_EXCEEDED: job 'job' has no key 'never' after 0.3 s"));
  CHECK(took >= 0.29);
  CHECK(took < 3);
}

TEST_CASE("rendezvous server: a wait is woken by a later put from another thread") {
  auto server = start_server();
  auto client = client_of(*server);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread putter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto other = client_of(*server);
    REQUIRE(other.put("job", "rank-1.endpoint", "127.0.0.1:4242").ok());
  });
  auto r = client.wait("job", "rank-1.endpoint", 20);
  const double took = seconds_since(t0);
  putter.join();
  REQUIRE(r.ok());
  CHECK(*r == "127.0.0.1:4242");
  CHECK(took >= 0.29);
  CHECK(took < 10);  // woken by the put, long before its timeout
}

TEST_CASE("rendezvous server: values over 1 MiB and keys past a job's limit are refused with RESOURCE_EXHAUSTED") {
  het::rendezvous::ServerOptions options;
  options.limits.max_keys_per_job = 3;
  auto server = start_server(options);
  auto client = client_of(*server);
  CHECK(client.put("job", "one-mib", std::string(1 << 20, 'x')).ok());
  auto r = client.put("job", "too-big", std::string((1 << 20) + 1, 'x'));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("RESOURCE_EXHAUSTED: the value of 'too-big' has 1048577 bytes"));
  auto huge = client.put("job", "huge", std::string(8 << 20, 'x'));  // refused before it is read
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(het::to_string(huge.errors()), Catch::Contains("RESOURCE_EXHAUSTED"));
  CHECK(client.put("job", "k2", "v").ok());
  CHECK(client.put("job", "k3", "v").ok());
  auto full = client.put("job", "k4", "v");
  REQUIRE_FALSE(full.ok());
  CHECK_THAT(het::to_string(full.errors()), Catch::Contains("RESOURCE_EXHAUSTED: job 'job' has 3 keys, its limit"));
}

TEST_CASE("rendezvous server: stopping it answers pending waits at once") {
  auto server = start_server();
  auto client = client_of(*server);
  auto waiting = std::async(std::launch::async, [&] { return client.wait("job", "k", 60); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  server->stop();
  CHECK(seconds_since(t0) < 5);
  REQUIRE(waiting.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto r = waiting.get();
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("UNAVAILABLE"));
}

TEST_CASE("rendezvous server: start errors name the problem") {
  het::rendezvous::ServerOptions no_port;
  no_port.listen = "localhost";
  auto r = RendezvousServer::start(no_port);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("expected HOST:PORT"));

  auto first = start_server();
  het::rendezvous::ServerOptions taken;
  taken.listen = first->address();
  auto again = RendezvousServer::start(taken);
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(het::to_string(again.errors()), Catch::Contains("cannot listen on '" + first->address() + "'"));
}

TEST_CASE("rendezvous client: a call to a server that is not there fails at its deadline") {
  int port = 0;
  {
    auto gone = start_server();
    port = gone->port();
  }
  auto client = RendezvousClient::open("127.0.0.1:" + std::to_string(port), {}, 0.5);
  REQUIRE(client.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client->put("job", "k", "v");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("rendezvous 127.0.0.1:" + std::to_string(port) + ": put 'k'"));
  CHECK(seconds_since(t0) < 5);
  auto w = client->wait("job", "k", 0.5);
  REQUIRE_FALSE(w.ok());
  CHECK(seconds_since(t0) < 10);
}

TEST_CASE("directory rendezvous: publish then wait, a missing key times out, bad keys are refused") {
  het::test::TempDir dir;
  het::rendezvous::DirectoryRendezvous a(dir.path()), b(dir.path());
  REQUIRE(a.publish("rank-0.endpoint", "127.0.0.1:5000").ok());
  auto got = b.wait("rank-0.endpoint", 1);
  REQUIRE(got.ok());
  CHECK(*got == "127.0.0.1:5000");
  std::ifstream file(dir.path() + "/rank-0.endpoint");  // the file hetexec worker has always used
  CHECK(file.good());
  const auto t0 = std::chrono::steady_clock::now();
  auto missing = b.wait("rank-1.endpoint", 0.2);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(het::to_string(missing.errors()), Catch::Contains("'rank-1.endpoint' was not published within 0.2 s"));
  CHECK(seconds_since(t0) < 3);
  CHECK_FALSE(a.publish("../escape", "x").ok());
}

TEST_CASE("open_rendezvous: grpc://HOST:PORT/JOB or a directory") {
  auto ok = het::rendezvous::parse_grpc_address("grpc://10.0.0.1:7000/job-42");
  REQUIRE(ok.ok());
  CHECK(ok->target == "10.0.0.1:7000");
  CHECK(ok->job == "job-42");
  for (const char* bad : {"grpc://10.0.0.1:7000", "grpc://10.0.0.1/job", "grpc://host:port/job", "grpc://h:1/bad job",
                          "grpc://h:99999/job", "grpc://h:0/job", "http://h:1/job"}) {
    INFO(bad);
    CHECK_FALSE(het::rendezvous::parse_grpc_address(bad).ok());
  }
  het::test::TempDir dir;
  CHECK(het::rendezvous::open_rendezvous(dir.path(), {}).ok());
  auto missing = het::rendezvous::open_rendezvous(dir.path() + "/nonexistent", {});
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(het::to_string(missing.errors()), Catch::Contains("does not exist"));
  auto token = het::rendezvous::open_rendezvous(dir.path(), {std::nullopt, "secret"});
  REQUIRE_FALSE(token.ok());
  CHECK_THAT(het::to_string(token.errors()), Catch::Contains("grpc:// rendezvous only"));
}

TEST_CASE("TCP peers: three ranks meet through the gRPC rendezvous (with a token) and exchange messages") {
  het::rendezvous::ServerOptions options;
  options.security.token = "s3cret-token";
  auto server = start_server(options);
  const int world = 3;
  std::vector<std::string> errors(world);
  std::vector<std::vector<int>> heard(world, std::vector<int>(world, -1));
  std::vector<std::vector<float>> sums(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      auto opened = het::rendezvous::open_rendezvous("grpc://" + server->address() + "/tcp-test", {std::nullopt, "s3cret-token"});
      if (!opened) return void(errors[r] = het::to_string(opened.errors()));
      auto peers = het::transport::Peers::connect(r, world, **opened, 30);
      if (!peers) return void(errors[r] = het::to_string(peers.errors()));
      for (int p = 0; p < world; ++p) {  // everyone tells everyone its rank, times 100
        if (p == r) continue;
        const std::int32_t msg = r * 100;
        (*peers)->send(p, 5, &msg, sizeof msg);
      }
      for (int p = 0; p < world; ++p) {
        if (p == r) continue;
        std::int32_t msg = -1;
        errors[r] += het::test::error_text((*peers)->recv(p, 5, &msg, sizeof msg));
        heard[r][p] = msg;
      }
      sums[r].assign(64, float(r + 1));
      errors[r] += het::test::error_text(het::transport::all_reduce_sum(**peers, {0, 1, 2}, sums[r].data(), sums[r].size(), 6));
      errors[r] += het::test::error_text((*peers)->flush());
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    for (int p = 0; p < world; ++p)
      if (p != r) CHECK(heard[r][p] == p * 100);
    for (float v : sums[r]) CHECK(v == 6.0f);
  }
  // The endpoints are in the server's store under the job, as "host:port".
  std::string endpoint;
  REQUIRE(server->store().get("tcp-test", "rank-2.endpoint", &endpoint).ok());
  CHECK_THAT(endpoint, Catch::StartsWith("127.0.0.1:"));
}
