#include "rendezvous/client.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "control/admission.hpp"
#include "control/status.hpp"
#include "hetexec.grpc.pb.h"

namespace het::rendezvous {

struct RendezvousClient::Connection {
  std::string target;
  control::ClientSecurity security;
  double call_timeout_s;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<het::v1::Rendezvous::Stub> stub;

  // A call's context: the token, a deadline, and waiting for the server to be reachable.
  void prepare(grpc::ClientContext& context, double timeout_s) const {
    control::attach_token(context, security.token);
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(timeout_s)));
    context.set_wait_for_ready(true);
  }
  Diagnostic failure(const std::string& what, const grpc::Status& status) const {
    std::string text = "rendezvous " + target + ": " + what + ": " + control::describe(status);
    const auto state = channel->GetState(false);
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_CONNECTING)
      text += " (the server could not be reached" + std::string(security.tls ? ", or the TLS handshake failed)" : ")");
    // A server gone or silent, or a key not published in time: a peer (submit, another rank)
    // is lost; refused credentials or arguments: invalid input; anything else: ours.
    ErrorKind kind = ErrorKind::internal;
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
      case grpc::StatusCode::CANCELLED: kind = ErrorKind::peer_lost; break;
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
      case grpc::StatusCode::INVALID_ARGUMENT: kind = ErrorKind::invalid_input; break;
      default: break;
    }
    return Diagnostic{"", 0, 0, "", text, kind};
  }
};

Result<RendezvousClient> RendezvousClient::open(const std::string& target, const control::ClientSecurity& security,
                                                double call_timeout_s) {
  auto channel = control::open_channel(target, security);
  if (!channel) return channel.errors();
  auto c = std::make_unique<Connection>();
  c->target = target;
  c->security = security;
  c->call_timeout_s = call_timeout_s;
  c->channel = *channel;
  c->stub = het::v1::Rendezvous::NewStub(c->channel);
  return RendezvousClient(std::move(c));
}

RendezvousClient::RendezvousClient(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}
RendezvousClient::RendezvousClient(RendezvousClient&&) noexcept = default;
RendezvousClient& RendezvousClient::operator=(RendezvousClient&&) noexcept = default;
RendezvousClient::~RendezvousClient() = default;

const std::string& RendezvousClient::target() const { return connection_->target; }

Result<Done> RendezvousClient::put(const std::string& job, const std::string& key, const std::string& value) const {
  het::v1::PutRequest request;
  request.set_api_version(control::api_version());
  request.set_job_id(job);
  request.set_key(key);
  request.set_value(value);
  het::v1::PutResponse response;
  grpc::ClientContext context;
  connection_->prepare(context, connection_->call_timeout_s);
  if (auto s = connection_->stub->Put(&context, request, &response); !s.ok())
    return connection_->failure("put '" + key + "' of job '" + job + "'", s);
  return Done{};
}

Result<std::optional<std::string>> RendezvousClient::get(const std::string& job, const std::string& key) const {
  het::v1::GetRequest request;
  request.set_api_version(control::api_version());
  request.set_job_id(job);
  request.set_key(key);
  het::v1::GetResponse response;
  grpc::ClientContext context;
  connection_->prepare(context, connection_->call_timeout_s);
  const auto s = connection_->stub->Get(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) return std::optional<std::string>();
  if (!s.ok()) return connection_->failure("get '" + key + "' of job '" + job + "'", s);
  return std::optional<std::string>(std::move(*response.mutable_value()));
}

Result<std::string> RendezvousClient::wait(const std::string& job, const std::string& key, double timeout_s) const {
  het::v1::WaitRequest request;
  request.set_api_version(control::api_version());
  request.set_job_id(job);
  request.set_key(key);
  // At least a millisecond: 0 is not a valid timeout, and a caller whose time ran out still
  // gets one look at the key.
  request.set_timeout_ms(static_cast<std::uint32_t>(std::clamp(std::ceil(timeout_s * 1000), 1.0, 4e9)));
  het::v1::WaitResponse response;
  grpc::ClientContext context;
  connection_->prepare(context, std::max(timeout_s, 0.0) + 1);  // the server answers at timeout_s
  if (auto s = connection_->stub->Wait(&context, request, &response); !s.ok())
    return connection_->failure("wait for '" + key + "' of job '" + job + "'", s);
  return std::move(*response.mutable_value());
}

}  // namespace het::rendezvous
