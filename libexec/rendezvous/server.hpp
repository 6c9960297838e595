#pragma once
// A job's rendezvous as a gRPC server (service het.v1.Rendezvous of proto/hetexec.proto): a
// Store served on a port, in this process. `hetexec submit` hosts one for its job; tests
// start one on a loopback port.
//
// Every call is admitted first (control/admission.hpp: token, then API version). Store
// answers become gRPC codes: an invalid job id, key or timeout INVALID_ARGUMENT; a missing key
// NOT_FOUND; a value over the limit or a full job RESOURCE_EXHAUSTED; a wait that timed out
// DEADLINE_EXCEEDED; a server that is stopping UNAVAILABLE.
#include <memory>
#include <string>

#include "control/credentials.hpp"
#include "diag/diag.hpp"
#include "rendezvous/store.hpp"

namespace het::rendezvous {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  control::ServerSecurity security;
  Limits limits;
};

class RendezvousServer {
 public:
  // Listens and serves until stop() or destruction. Errors: unreadable TLS files, an invalid
  // token, an address it cannot listen on.
  static Result<std::unique_ptr<RendezvousServer>> start(const ServerOptions& options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;
  // "HOST:PORT" with the listening host and the port actually bound.
  std::string address() const;
  // The keys served; the host may drop() a finished job.
  Store& store();
  // Answers pending waits with UNAVAILABLE and stops serving (within a second); idempotent.
  void stop();

 private:
  struct State;
  explicit RendezvousServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace het::rendezvous
