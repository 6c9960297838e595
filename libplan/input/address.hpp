#pragma once
// HOST:PORT as the user writes it (hetexec agent --listen, submit --agents and --inventory,
// --rendezvous-listen, a grpc:// rendezvous, the endpoints workers publish): the one parser
// every one of them goes through, so that a port outside 1..65535 is refused everywhere
// rather than wrapped (gRPC bound 127.0.0.1:99999 to port 34463).
#include <string>

#include "diag/diag.hpp"

namespace het::input {

struct HostPort {
  std::string host;  // a name, an IPv4 address, or an IPv6 address in brackets ([::1])
  int port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

// Whether port 0 (any free port, chosen when the server binds) is meaningful: for an address
// to listen on, not for one to connect to.
enum class AnyPort { refused, allowed };

// Parses "HOST:PORT": a non-empty host of letters, digits, '.', '-', '_' (or [IPv6]) and a
// decimal port in 1..65535 (0..65535 with AnyPort::allowed). Errors name `field` and the text:
// "listen: '127.0.0.1:99999': the port must be between 0 (any free port) and 65535".
Result<HostPort> parse_host_port(const std::string& text, const std::string& field, AnyPort any = AnyPort::refused);
// Why `text` is not such a HOST:PORT ("no port", "the port must be between 1 and 65535", ...),
// or "" when it is one: for a message of the caller's own.
std::string host_port_problem(const std::string& text, AnyPort any = AnyPort::refused);

}  // namespace het::input
