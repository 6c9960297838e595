#include "launch/cause.hpp"

namespace het::launch {

int exit_status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::internal: return 1;
    case ErrorKind::invalid_input: return 2;
    case ErrorKind::unsupported: return 3;
    case ErrorKind::peer_lost: return 4;
    case ErrorKind::hung: return 5;
    case ErrorKind::killed: return 6;
    case ErrorKind::aborted: return 7;
  }
  return 1;
}

ErrorKind kind_of_exit(int exit_status, int signal) {
  if (signal != 0) return ErrorKind::killed;
  for (ErrorKind k : {ErrorKind::invalid_input, ErrorKind::unsupported, ErrorKind::peer_lost, ErrorKind::hung, ErrorKind::killed,
                      ErrorKind::aborted})
    if (exit_status_of(k) == exit_status) return k;
  return ErrorKind::internal;
}

int precedence(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::killed:
    case ErrorKind::hung: return 3;
    case ErrorKind::internal:
    case ErrorKind::invalid_input:
    case ErrorKind::unsupported: return 2;
    case ErrorKind::peer_lost: return 1;
    case ErrorKind::aborted: return 0;
  }
  return 2;
}

std::size_t root_cause(const std::vector<ErrorKind>& failures) {
  std::size_t root = 0;
  for (std::size_t i = 1; i < failures.size(); ++i)
    if (precedence(failures[i]) > precedence(failures[root])) root = i;
  return root;
}

}  // namespace het::launch
