#pragma once
// ErrorKind (libplan/diag/diag.hpp) to and from the protocol's ErrorKind (proto/hetexec.proto).
// Needs the generated hetexec.pb.h: for the agent and submit, which link the proto library.
#include "diag/diag.hpp"
#include "hetexec.pb.h"

namespace het::control {

inline v1::ErrorKind to_proto(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_input: return v1::ERROR_KIND_INVALID_INPUT;
    case ErrorKind::unsupported: return v1::ERROR_KIND_UNSUPPORTED;
    case ErrorKind::peer_lost: return v1::ERROR_KIND_PEER_LOST;
    case ErrorKind::hung: return v1::ERROR_KIND_HUNG;
    case ErrorKind::killed: return v1::ERROR_KIND_KILLED;
    case ErrorKind::aborted: return v1::ERROR_KIND_ABORTED;
    case ErrorKind::internal: return v1::ERROR_KIND_INTERNAL;
  }
  return v1::ERROR_KIND_INTERNAL;
}

// Unspecified (an agent from before kinds) and values this build does not know: internal.
inline ErrorKind from_proto(v1::ErrorKind kind) {
  switch (kind) {
    case v1::ERROR_KIND_INVALID_INPUT: return ErrorKind::invalid_input;
    case v1::ERROR_KIND_UNSUPPORTED: return ErrorKind::unsupported;
    case v1::ERROR_KIND_PEER_LOST: return ErrorKind::peer_lost;
    case v1::ERROR_KIND_HUNG: return ErrorKind::hung;
    case v1::ERROR_KIND_KILLED: return ErrorKind::killed;
    case v1::ERROR_KIND_ABORTED: return ErrorKind::aborted;
    default: return ErrorKind::internal;
  }
}

}  // namespace het::control
