#include "input/address.hpp"

#include <algorithm>
#include <cctype>

namespace het::input {

namespace {

// The host and port of `text`, or why it is not a HOST:PORT.
std::string split(const std::string& text, AnyPort any, HostPort& out) {
  const std::string range = any == AnyPort::allowed ? "between 0 (any free port) and 65535" : "between 1 and 65535";
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return "no port";
  out.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (out.host.empty()) return "no host";
  if (out.host.size() > 253) return "the host is longer than 253 characters";
  const bool bracketed = out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']';
  const auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'; };
  const auto ipv6_char = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; };
  if (bracketed ? !std::all_of(out.host.begin() + 1, out.host.end() - 1, ipv6_char)
                : !std::all_of(out.host.begin(), out.host.end(), name_char))
    return "the host must be a name, an IPv4 address or an [IPv6] address";
  if (port.empty()) return "no port";
  if (port.find_first_not_of("0123456789") != std::string::npos) return "the port must be a number " + range;
  // Digits beyond five cannot be a port; counting them avoids any overflow.
  const std::size_t digits = port.size() - std::min(port.find_first_not_of('0'), port.size());
  const long value = digits > 5 ? 100000 : std::stol(port);
  if (value < (any == AnyPort::allowed ? 0 : 1) || value > 65535) return "the port must be " + range;
  out.port = static_cast<int>(value);
  return "";
}

}  // namespace

Result<HostPort> parse_host_port(const std::string& text, const std::string& field, AnyPort any) {
  HostPort out;
  if (auto why = split(text, any, out); !why.empty())
    return Diagnostic{"", 0, 0, field, "'" + text + "': " + why + " (expected HOST:PORT)"};
  return out;
}

std::string host_port_problem(const std::string& text, AnyPort any) {
  HostPort out;
  return split(text, any, out);
}

}  // namespace het::input
