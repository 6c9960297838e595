#include "rendezvous/open.hpp"

#include <filesystem>

#include "input/address.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/directory.hpp"

namespace het::rendezvous {

namespace {
constexpr std::string_view kScheme = "grpc://";
}

Result<GrpcAddress> parse_grpc_address(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return Diagnostic{"", 0, 0, "", "rendezvous '" + address + "': " + why + " (expected grpc://HOST:PORT/JOB)"};
  };
  if (address.rfind(kScheme, 0) != 0) return bad("not a grpc:// address");
  const std::string rest = address.substr(kScheme.size());
  const auto slash = rest.find('/');
  if (slash == std::string::npos) return bad("no job id");
  GrpcAddress a{rest.substr(0, slash), rest.substr(slash + 1)};
  const auto colon = a.target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.target.size()) return bad("no HOST:PORT");
  if (auto why = input::host_port_problem(a.target); !why.empty()) return bad(why);
  if (!valid_key(a.job)) return bad("the job id must be 1 to 128 characters of [A-Za-z0-9._-], not starting with '.'");
  return a;
}

Result<std::unique_ptr<Rendezvous>> open_rendezvous(const std::string& address, const control::ClientSecurity& security) {
  if (address.rfind(kScheme, 0) == 0) {
    auto a = parse_grpc_address(address);
    if (!a) return a.errors();
    auto client = RendezvousClient::open(a->target, security);
    if (!client) return client.errors();
    return std::unique_ptr<Rendezvous>(std::make_unique<GrpcRendezvous>(std::move(*client), a->job));
  }
  if (!security.token.empty() || security.tls)
    return Diagnostic{address, 0, 0, "", "a token or TLS applies to a grpc:// rendezvous only, not to a directory"};
  std::error_code ec;
  if (!std::filesystem::is_directory(address, ec)) return Diagnostic{address, 0, 0, "", "the rendezvous directory does not exist"};
  return std::unique_ptr<Rendezvous>(std::make_unique<DirectoryRendezvous>(address));
}

}  // namespace het::rendezvous
