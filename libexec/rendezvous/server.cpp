#include "rendezvous/server.hpp"

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <mutex>

#include "control/admission.hpp"
#include "input/address.hpp"
#include "hetexec.grpc.pb.h"

namespace het::rendezvous {

namespace {

grpc::Status to_grpc(const StoreStatus& s) {
  using Code = StoreStatus::Code;
  switch (s.code) {
    case Code::ok: return grpc::Status::OK;
    case Code::invalid: return {grpc::StatusCode::INVALID_ARGUMENT, s.message};
    case Code::not_found: return {grpc::StatusCode::NOT_FOUND, s.message};
    case Code::too_large:
    case Code::full: return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message};
    case Code::timed_out: return {grpc::StatusCode::DEADLINE_EXCEEDED, s.message};
    case Code::cancelled: return {grpc::StatusCode::CANCELLED, s.message};
    case Code::closed: return {grpc::StatusCode::UNAVAILABLE, s.message};
  }
  return {grpc::StatusCode::INTERNAL, s.message};
}

class Service final : public het::v1::Rendezvous::Service {
 public:
  Service(Store& store, const std::string& token) : store_(store), admission_(token) {}

  grpc::Status Put(grpc::ServerContext* context, const het::v1::PutRequest* request, het::v1::PutResponse*) override {
    if (auto refused = admission_.admit(*context, request->api_version()); !refused.ok()) return refused;
    return to_grpc(store_.put(request->job_id(), request->key(), request->value()));
  }

  grpc::Status Get(grpc::ServerContext* context, const het::v1::GetRequest* request, het::v1::GetResponse* response) override {
    if (auto refused = admission_.admit(*context, request->api_version()); !refused.ok()) return refused;
    return to_grpc(store_.get(request->job_id(), request->key(), response->mutable_value()));
  }

  grpc::Status Wait(grpc::ServerContext* context, const het::v1::WaitRequest* request, het::v1::WaitResponse* response) override {
    if (auto refused = admission_.admit(*context, request->api_version()); !refused.ok()) return refused;
    return to_grpc(store_.wait(request->job_id(), request->key(), request->timeout_ms() / 1000.0, response->mutable_value(),
                               [context] { return context->IsCancelled(); }));
  }

 private:
  Store& store_;
  control::Admission admission_;
};

}  // namespace

struct RendezvousServer::State {
  explicit State(const ServerOptions& options) : store(options.limits), service(store, options.security.token) {}
  Store store;
  Service service;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  int port = 0;
  std::once_flag stopped;
};

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(const ServerOptions& options) {
  if (!options.security.token.empty() && !control::valid_token(options.security.token))
    return Diagnostic{"", 0, 0, "", "the rendezvous token must be one word of printable ASCII characters"};
  auto credentials = control::server_credentials(options.security);
  if (!credentials) return credentials.errors();
  auto listen = input::parse_host_port(options.listen, "listen", input::AnyPort::allowed);
  if (!listen) return listen.errors();
  auto state = std::make_unique<State>(options);
  state->host = listen->host;
  grpc::ServerBuilder builder;
  // gRPC binds with SO_REUSEPORT by default, which would let a second server (anyone's) share
  // the port and receive some of the job's calls; a port is this server's alone.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, *credentials, &state->port);
  builder.RegisterService(&state->service);
  // A request is a value and its names: refuse anything much larger before reading it.
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.limits.max_value_bytes + (64 << 10)));
  state->server = builder.BuildAndStart();
  if (!state->server || state->port == 0)
    return Diagnostic{"", 0, 0, "", "cannot listen on '" + options.listen + "' (address in use or not this machine's?)"};
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(state)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

RendezvousServer::~RendezvousServer() { stop(); }

int RendezvousServer::port() const { return state_->port; }

std::string RendezvousServer::address() const { return state_->host + ":" + std::to_string(state_->port); }

Store& RendezvousServer::store() { return state_->store; }

void RendezvousServer::stop() {
  std::call_once(state_->stopped, [this] {
    state_->store.close();  // pending waits return at once, so that shutting down need not wait for them
    state_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    state_->server->Wait();
  });
}

}  // namespace het::rendezvous
