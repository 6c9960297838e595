// Securing and versioning the control plane's gRPC endpoints: token files, every call refused
// without the right token, API versions, TLS (with and without client certificates). Real
// servers on loopback ports.
#include <catch2/catch.hpp>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <sstream>

#include "control/admission.hpp"
#include "control/credentials.hpp"
#include "hetexec.grpc.pb.h"
#include "process.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/server.hpp"

using het::rendezvous::RendezvousClient;
using het::rendezvous::RendezvousServer;

namespace {

std::unique_ptr<RendezvousServer> start_server(const het::control::ServerSecurity& security) {
  het::rendezvous::ServerOptions options;
  options.security = security;
  auto server = RendezvousServer::start(options);
  INFO((server ? "" : het::to_string(server.errors())));
  REQUIRE(server.ok());
  return std::move(*server);
}

// Calls `method` ("/het.v1.Rendezvous/Put") with an empty request (every field unset) and the
// given token; the status it ends with.
grpc::Status call_empty(const std::string& address, const std::string& method, const std::string& token) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  het::control::attach_token(context, token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty{std::string()};
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

// Every unary method of a service, as "/package.Service/Method".
std::vector<std::string> methods_of(const std::string& service_name) {
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
  REQUIRE(service != nullptr);
  std::vector<std::string> out;
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* m = service->method(i);
    REQUIRE_FALSE(m->client_streaming());  // call_empty makes unary calls only
    REQUIRE_FALSE(m->server_streaming());
    out.push_back("/" + service_name + "/" + m->name());
  }
  return out;
}

het::v1::PutRequest put_request(const std::string& key, std::uint32_t api_version = het::v1::API_VERSION_CURRENT) {
  het::v1::PutRequest r;
  r.set_api_version(api_version);
  r.set_job_id("job");
  r.set_key(key);
  r.set_value("v");
  return r;
}

}  // namespace

TEST_CASE("token files: whitespace is trimmed, missing, empty and multi-word tokens are refused clearly") {
  het::test::TempDir dir;
  auto ok = het::control::read_token_file(dir.write("token", "  s3cret-Token_01\n\n"));
  REQUIRE(ok.ok());
  CHECK(*ok == "s3cret-Token_01");

  auto missing = het::control::read_token_file(dir.path() + "/none");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(het::to_string(missing.errors()), Catch::Contains(dir.path() + "/none: cannot read the token file"));
  for (const char* text : {"", " \n\t\n"}) {
    auto empty = het::control::read_token_file(dir.write("empty", text));
    REQUIRE_FALSE(empty.ok());
    CHECK_THAT(het::to_string(empty.errors()), Catch::Contains("empty: the token file is empty"));
  }
  auto two_words = het::control::read_token_file(dir.write("two", "two words\n"));
  REQUIRE_FALSE(two_words.ok());
  CHECK_THAT(het::to_string(two_words.errors()), Catch::Contains("one word of printable ASCII"));
  CHECK_FALSE(het::control::read_token_file(dir.write("ctl", "a\x01" "b")).ok());
}

TEST_CASE("token: every Rendezvous call without the right token is refused with PERMISSION_DENIED before any work") {
  auto server = start_server({std::nullopt, "the-token"});
  const auto methods = methods_of("het.v1.Rendezvous");
  CHECK(methods.size() == 3);
  for (const auto& method : methods) {
    INFO(method);
    // The requests are empty (no API version either): the token is checked first.
    auto none = call_empty(server->address(), method, "");
    CHECK(none.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(none.error_message(), Catch::Contains("requires a bearer token"));
    auto wrong = call_empty(server->address(), method, "not-the-token");
    CHECK(wrong.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(wrong.error_message(), Catch::Contains("bearer token is wrong"));
    auto prefix = call_empty(server->address(), method, "the-toke");
    CHECK(prefix.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    // With the token, the same empty request gets past admission to the version check.
    CHECK(call_empty(server->address(), method, "the-token").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }

  // A refused put stores nothing; the right token's put does.
  auto stub = het::v1::Rendezvous::NewStub(grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  het::v1::PutResponse response;
  {
    grpc::ClientContext context;
    het::control::attach_token(context, "wrong");
    CHECK(stub->Put(&context, put_request("refused"), &response).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  std::string value;
  CHECK(server->store().get("job", "refused", &value).code == het::rendezvous::StoreStatus::Code::not_found);
  {
    grpc::ClientContext context;
    het::control::attach_token(context, "the-token");
    CHECK(stub->Put(&context, put_request("admitted"), &response).ok());
  }
  CHECK(server->store().get("job", "admitted", &value).ok());

  // The client: the right token works; a wrong one names the refusal.
  auto right = RendezvousClient::open(server->address(), {std::nullopt, "the-token"});
  REQUIRE(right.ok());
  CHECK(right->put("job", "k", "v").ok());
  auto wrong = RendezvousClient::open(server->address(), {std::nullopt, "nope"});
  REQUIRE(wrong.ok());
  auto refused = wrong->wait("job", "k", 5);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(het::to_string(refused.errors()), Catch::Contains("PERMISSION_DENIED: the call's bearer token is wrong"));
}

TEST_CASE("API version: a request of another version is refused with FAILED_PRECONDITION naming both versions") {
  REQUIRE(het::control::api_version() == het::v1::API_VERSION_CURRENT);
  auto server = start_server({});
  auto stub = het::v1::Rendezvous::NewStub(grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  het::v1::PutResponse response;
  const std::string current = std::to_string(het::control::api_version());
  {
    grpc::ClientContext context;
    auto s = stub->Put(&context, put_request("k", het::control::api_version() + 1), &response);
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(s.error_message() == "API version mismatch: the request is het.v1 API version " +
                                   std::to_string(het::control::api_version() + 1) + ", this server speaks version " + current);
  }
  {
    grpc::ClientContext context;
    auto s = stub->Put(&context, put_request("k", 0), &response);
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(s.error_message(), Catch::Contains("API version 0 (unset), this server speaks version " + current));
  }
  std::string value;
  CHECK_FALSE(server->store().get("job", "k", &value).ok());  // refused before any work
  for (const auto& method : methods_of("het.v1.Rendezvous")) {
    INFO(method);
    CHECK(call_empty(server->address(), method, "").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
}

TEST_CASE("TLS: a client that trusts the server's certificate connects, plaintext and untrusting clients do not") {
  const std::string openssl = het::test::find_program("openssl");
  if (openssl.empty()) {
    WARN("openssl is not installed: TLS tests skipped");
    return;
  }
  het::test::TempDir dir;
  REQUIRE(het::test::make_certificate(openssl, dir.path(), "server"));
  het::control::ServerSecurity security;
  security.tls = het::control::ServerTls{dir.path() + "/server.pem", dir.path() + "/server.key", ""};
  security.token = "tls-token";
  auto server = start_server(security);

  het::control::ClientTls trusting{dir.path() + "/server.pem", "", "", ""};
  auto tls = RendezvousClient::open(server->address(), {trusting, "tls-token"}, 10);
  REQUIRE(tls.ok());
  auto put = tls->put("job", "k", "over TLS");
  INFO((put ? "" : het::to_string(put.errors())));
  REQUIRE(put.ok());
  auto got = tls->wait("job", "k", 5);
  REQUIRE(got.ok());
  CHECK(*got == "over TLS");
  // By name too, when the client says which name the certificate must carry.
  het::control::ClientTls by_name = trusting;
  by_name.server_name = "localhost";
  auto named = RendezvousClient::open("127.0.0.1:" + std::to_string(server->port()), {by_name, "tls-token"}, 10);
  REQUIRE(named.ok());
  CHECK(named->put("job", "k2", "v").ok());

  auto plaintext = RendezvousClient::open(server->address(), {std::nullopt, "tls-token"}, 1);
  REQUIRE(plaintext.ok());
  CHECK_FALSE(plaintext->put("job", "plain", "v").ok());
  auto untrusting = RendezvousClient::open(server->address(), {het::control::ClientTls{}, "tls-token"}, 1);  // system roots
  REQUIRE(untrusting.ok());
  CHECK_FALSE(untrusting->put("job", "untrusted", "v").ok());
  std::string value;
  CHECK_FALSE(server->store().get("job", "plain", &value).ok());
  CHECK_FALSE(server->store().get("job", "untrusted", &value).ok());
}

TEST_CASE("TLS with a client CA: only clients presenting a certificate it signed get in") {
  const std::string openssl = het::test::find_program("openssl");
  if (openssl.empty()) {
    WARN("openssl is not installed: TLS tests skipped");
    return;
  }
  het::test::TempDir dir;
  REQUIRE(het::test::make_certificate(openssl, dir.path(), "server"));
  REQUIRE(het::test::make_certificate(openssl, dir.path(), "client"));
  REQUIRE(het::test::make_certificate(openssl, dir.path(), "stranger"));
  het::control::ServerSecurity security;
  security.tls = het::control::ServerTls{dir.path() + "/server.pem", dir.path() + "/server.key", dir.path() + "/client.pem"};
  auto server = start_server(security);
  auto client_with = [&](const std::string& name) {
    het::control::ClientTls tls{dir.path() + "/server.pem", "", "", ""};
    if (!name.empty()) tls.cert_file = dir.path() + "/" + name + ".pem", tls.key_file = dir.path() + "/" + name + ".key";
    auto c = RendezvousClient::open(server->address(), {tls, ""}, 2);
    REQUIRE(c.ok());
    return std::move(*c);
  };
  auto put = client_with("client").put("job", "k", "v");
  INFO((put ? "" : het::to_string(put.errors())));
  CHECK(put.ok());
  CHECK_FALSE(client_with("").put("job", "none", "v").ok());
  CHECK_FALSE(client_with("stranger").put("job", "stranger", "v").ok());
}

TEST_CASE("credentials: missing or malformed certificate files are named, a client certificate needs its key") {
  het::test::TempDir dir;
  het::control::ServerSecurity security;
  security.tls = het::control::ServerTls{dir.path() + "/none.pem", dir.write("key.pem", "not a key"), ""};
  auto r = het::control::server_credentials(security);
  REQUIRE_FALSE(r.ok());
  const std::string text = het::to_string(r.errors());
  CHECK_THAT(text, Catch::Contains(dir.path() + "/none.pem: cannot read the TLS certificate file"));
  CHECK_THAT(text, Catch::Contains("key.pem: the TLS private key file is not PEM"));

  het::control::ClientTls half{"", dir.path() + "/c.pem", "", ""};
  auto c = het::control::open_channel("127.0.0.1:1", {half, ""});
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(het::to_string(c.errors()), Catch::Contains("needs both its certificate file and its key file"));

  auto bad_token = RendezvousServer::start({"127.0.0.1:0", {std::nullopt, "two words"}, {}});
  REQUIRE_FALSE(bad_token.ok());
  CHECK_THAT(het::to_string(bad_token.errors()), Catch::Contains("one word of printable ASCII"));
}
