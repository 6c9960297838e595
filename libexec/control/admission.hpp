#pragma once
// Admission of every call to a hetexec gRPC service (Agent, Rendezvous). The first statement
// of every handler is
//     if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
// so that no call does any work before it is admitted. In this order:
//  1. the bearer token, when the server has one: a call without the metadata
//     "authorization: Bearer <token>", or with another token, is refused with PERMISSION_DENIED;
//  2. the API version: a request of another version than api_version() (including an unset
//     0) is refused with FAILED_PRECONDITION and a message naming both versions.
#include <cstdint>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

namespace het::control {

// The API version this build speaks: het.v1.API_VERSION_CURRENT of proto/hetexec.proto.
std::uint32_t api_version();

class Admission {
 public:
  // `token` empty: calls need no token (but must still speak this API version).
  explicit Admission(const std::string& token);
  grpc::Status admit(const grpc::ServerContextBase& context, std::uint32_t request_api_version) const;

 private:
  std::string expected_;  // the whole metadata value, "Bearer <token>"; empty: no token
};

}  // namespace het::control
