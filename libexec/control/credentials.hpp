#pragma once
// How hetexec's gRPC endpoints (agents, a job's rendezvous) are secured: TLS when certificate
// files are given, plaintext otherwise; and a shared bearer token.
//
// Servers: server_credentials() for the listening port; the token is checked on every call by
// control::Admission (admission.hpp). Clients: open_channel(), then attach_token() on the
// ClientContext of every call, which sends the metadata "authorization: Bearer <token>".
// The token travels as per-call metadata rather than as gRPC call credentials because gRPC
// sends call credentials over TLS only, and a token without TLS on a trusted network
// (loopback, a private cluster network) is a supported setup.
//
// Every function reads the files it is given and reports a missing, unreadable or malformed
// one as a Diagnostic naming the file.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/server_credentials.h>

#include "diag/diag.hpp"

namespace het::control {

struct ServerTls {
  std::string cert_file;       // PEM certificate chain of this server
  std::string key_file;        // PEM private key of that certificate
  std::string client_ca_file;  // when set, clients must present a certificate this CA signed
};

struct ServerSecurity {
  std::optional<ServerTls> tls;  // none: plaintext
  std::string token;             // non-empty: every call must carry this bearer token
};

struct ClientTls {
  std::string ca_file;      // PEM CA that signed the server's certificate; empty: the system's roots
  std::string cert_file;    // this client's PEM certificate chain, for servers that require one
  std::string key_file;     // and its private key (both or neither)
  std::string server_name;  // the name the server's certificate must carry; empty: the target's host
};

struct ClientSecurity {
  std::optional<ClientTls> tls;  // none: plaintext
  std::string token;             // non-empty: sent with every call
};

// The most bytes read from a token, certificate, key or CA file: they are far smaller.
inline constexpr std::uint64_t kMaxCredentialBytes = 1 << 20;

// Who besides its owner may have access to a token file. A daemon's (an agent's) must be its
// owner's alone, as ssh refuses a private key others can read: "the token file can be read or
// written by others (mode 0644): chmod 600 FILE". A client's may be shared (a CI secret mount).
enum class TokenAccess { shared, owner_only };

// The token in `path`: the file's text without leading and trailing whitespace. Refuses an
// unreadable, empty or oversized file (input::read_file: regular files only), a token with
// other characters than printable ASCII (no spaces), and with TokenAccess::owner_only a file
// with any group or other permission bit.
Result<std::string> read_token_file(const std::string& path, TokenAccess access = TokenAccess::shared);

// Whether `token` is usable: non-empty printable ASCII without spaces (what metadata carries).
bool valid_token(const std::string& token);

// Credentials for a server's listening port: TLS with the files in `security.tls`, else
// plaintext. (The token is not part of them: see Admission.)
Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const ServerSecurity& security);

// A channel to `target` ("HOST:PORT"), over TLS when `security.tls` is set.
Result<std::shared_ptr<grpc::Channel>> open_channel(const std::string& target, const ClientSecurity& security);

// Adds "authorization: Bearer <token>" to a call's metadata; nothing when `token` is empty.
void attach_token(grpc::ClientContext& context, const std::string& token);

}  // namespace het::control
