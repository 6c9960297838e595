#pragma once
// A failed call's gRPC status as text for people: "CODE_NAME: message".
#include <iterator>
#include <string>

#include <grpcpp/support/status.h>

namespace het::control {

inline std::string describe(const grpc::Status& status) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",  "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
      "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const auto code = static_cast<std::size_t>(status.error_code());
  const std::string name = code < std::size(kNames) ? kNames[code] : "code " + std::to_string(code);
  return status.error_message().empty() ? name : name + ": " + status.error_message();
}

}  // namespace het::control
