#pragma once
// A job's rendezvous from its address on a command line (`hetexec worker --rendezvous`):
//   grpc://HOST:PORT/JOB  the job JOB on the gRPC rendezvous server at HOST:PORT, reached with
//                         `security` (its token, TLS);
//   anything else         a directory the job's processes share (it must exist); `security`
//                         must then be empty, since a directory has no token or TLS.
#include <memory>
#include <string>

#include "control/credentials.hpp"
#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"

namespace het::rendezvous {

struct GrpcAddress {
  std::string target;  // HOST:PORT
  std::string job;
};

// Parses "grpc://HOST:PORT/JOB"; an error naming what is missing.
Result<GrpcAddress> parse_grpc_address(const std::string& address);

Result<std::unique_ptr<Rendezvous>> open_rendezvous(const std::string& address, const control::ClientSecurity& security);

}  // namespace het::rendezvous
