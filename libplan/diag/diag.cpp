#include "diag/diag.hpp"

namespace het {

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
