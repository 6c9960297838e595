#include "diag/diag.hpp"

namespace het {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_input: return "invalid input";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::peer_lost: return "peer lost";
    case ErrorKind::hung: return "hung";
    case ErrorKind::killed: return "killed";
    case ErrorKind::aborted: return "aborted";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

std::string Diagnostic::to_string() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line > 0) {
      out += ':' + std::to_string(line);
      if (column > 0) out += ':' + std::to_string(column);
    }
    out += ": ";
  } else if (line > 0) {
    out += "line " + std::to_string(line) + ": ";
  }
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

std::string to_string(const Diagnostics& diagnostics) {
  std::string out;
  for (const auto& d : diagnostics) out += d.to_string() + '\n';
  return out;
}

}  // namespace het
