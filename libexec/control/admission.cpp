#include "control/admission.hpp"

#include "hetexec.pb.h"

namespace het::control {

std::uint32_t api_version() { return het::v1::API_VERSION_CURRENT; }

Admission::Admission(const std::string& token) : expected_(token.empty() ? "" : "Bearer " + token) {}

namespace {
// Compares in time independent of where the texts differ, so that the token cannot be
// guessed a character at a time from response times.
bool same_text(grpc::string_ref a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < b.size(); ++i)
    diff |= static_cast<unsigned char>(i < a.size() ? a.data()[i] ^ b[i] : 1);
  return diff == 0;
}
}  // namespace

grpc::Status Admission::admit(const grpc::ServerContextBase& context, std::uint32_t request_api_version) const {
  if (!expected_.empty()) {
    const auto& metadata = context.client_metadata();
    const auto found = metadata.find("authorization");
    if (found == metadata.end())
      return {grpc::StatusCode::PERMISSION_DENIED,
              "this server requires a bearer token (metadata \"authorization: Bearer <token>\") and the call had none"};
    if (!same_text(found->second, expected_)) return {grpc::StatusCode::PERMISSION_DENIED, "the call's bearer token is wrong"};
  }
  if (request_api_version != api_version())
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "API version mismatch: the request is het.v1 API version " + std::to_string(request_api_version) +
                (request_api_version == 0 ? " (unset)" : "") + ", this server speaks version " +
                std::to_string(api_version())};
  return grpc::Status::OK;
}

}  // namespace het::control
