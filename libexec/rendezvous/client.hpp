#pragma once
// Clients of a job's gRPC rendezvous (service het.v1.Rendezvous; rendezvous/server.hpp).
// RendezvousClient makes the three calls for any job; GrpcRendezvous is the Rendezvous of one
// job (what the TCP transport takes). Every call has a deadline and waits for the server to
// come up within it (a worker may start before its rendezvous); errors name the server and the
// gRPC code, e.g. "rendezvous 10.0.0.1:7000: PERMISSION_DENIED: the call's bearer token is wrong".
// Both are safe to use from several threads at once.
#include <memory>
#include <optional>
#include <string>

#include "control/credentials.hpp"
#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"

namespace het::rendezvous {

class RendezvousClient {
 public:
  // A client of the server at `target` ("HOST:PORT"); does not connect yet. `call_timeout_s`
  // bounds put and get (wait has its own timeout).
  static Result<RendezvousClient> open(const std::string& target, const control::ClientSecurity& security,
                                       double call_timeout_s = 30);
  RendezvousClient(RendezvousClient&&) noexcept;
  RendezvousClient& operator=(RendezvousClient&&) noexcept;
  ~RendezvousClient();

  Result<Done> put(const std::string& job, const std::string& key, const std::string& value) const;
  // The value, or nullopt when the job has no such key.
  Result<std::optional<std::string>> get(const std::string& job, const std::string& key) const;
  // The value once the key exists; an error when it does not within timeout_s seconds
  // (at most 3600; the call itself is bounded by timeout_s plus a second).
  Result<std::string> wait(const std::string& job, const std::string& key, double timeout_s) const;

  const std::string& target() const;

 private:
  struct Connection;
  explicit RendezvousClient(std::unique_ptr<Connection> connection);
  std::unique_ptr<Connection> connection_;
};

// The rendezvous of job `job` on a gRPC rendezvous server.
class GrpcRendezvous final : public Rendezvous {
 public:
  GrpcRendezvous(RendezvousClient client, std::string job) : client_(std::move(client)), job_(std::move(job)) {}
  Result<Done> publish(const std::string& key, const std::string& value) override { return client_.put(job_, key, value); }
  Result<std::string> wait(const std::string& key, double timeout_s) override { return client_.wait(job_, key, timeout_s); }

 private:
  RendezvousClient client_;
  std::string job_;
};

}  // namespace het::rendezvous
