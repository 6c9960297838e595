#include "control/credentials.hpp"

#include <sys/stat.h>

#include <cstdio>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "input/input.hpp"

namespace het::control {

namespace {

Result<std::string> read_file(const std::string& path, const char* what) {
  if (path.empty()) return Diagnostic{"", 0, 0, "", std::string("no file given for the ") + what};
  auto text = input::read_file(path, kMaxCredentialBytes);
  if (!text) {  // "cannot read the token file: it is not a regular file (a FIFO)"
    std::string why = text.errors().front().message;
    for (const char* prefix : {"cannot open the file: ", "cannot read the file: "})
      if (why.rfind(prefix, 0) == 0) why = why.substr(std::string(prefix).size());
    return Diagnostic{path, 0, 0, "", std::string("cannot read the ") + what + " file: " + why};
  }
  return text;
}

// A PEM file: read, and at least one "-----BEGIN" block in it.
Result<std::string> read_pem(const std::string& path, const char* what) {
  auto text = read_file(path, what);
  if (text && text->find("-----BEGIN ") == std::string::npos)
    return Diagnostic{path, 0, 0, "", std::string("the ") + what + " file is not PEM (no -----BEGIN line)"};
  return text;
}

}  // namespace

bool valid_token(const std::string& token) {
  if (token.empty()) return false;
  for (char c : token)
    if (c < 0x21 || c > 0x7E) return false;
  return true;
}

Result<std::string> read_token_file(const std::string& path, TokenAccess access) {
  auto text = read_file(path, "token");
  if (!text) return text.errors();
  struct stat st {};
  if (access == TokenAccess::owner_only && ::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return Diagnostic{path, 0, 0, "", std::string("the token file can be read or written by others (mode ") + mode +
                                          "): make it its owner's alone, chmod 600 " + path};
  }
  const char* space = " \t\r\n\f\v";
  const auto first = text->find_first_not_of(space);
  if (first == std::string::npos) return Diagnostic{path, 0, 0, "", "the token file is empty"};
  std::string token = text->substr(first, text->find_last_not_of(space) - first + 1);
  if (!valid_token(token))
    return Diagnostic{path, 0, 0, "", "the token must be one word of printable ASCII characters (no spaces or control characters)"};
  return token;
}

Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const ServerSecurity& security) {
  if (!security.tls) return grpc::InsecureServerCredentials();
  const ServerTls& tls = *security.tls;
  Diagnostics errors;
  auto cert = read_pem(tls.cert_file, "TLS certificate");
  auto key = read_pem(tls.key_file, "TLS private key");
  if (!cert) errors.insert(errors.end(), cert.errors().begin(), cert.errors().end());
  if (!key) errors.insert(errors.end(), key.errors().begin(), key.errors().end());
  std::optional<Result<std::string>> ca;
  if (!tls.client_ca_file.empty()) {
    ca = read_pem(tls.client_ca_file, "client CA");
    if (!*ca) errors.insert(errors.end(), (*ca).errors().begin(), (*ca).errors().end());
  }
  if (!errors.empty()) return errors;
  grpc::SslServerCredentialsOptions options(ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (ca) options.pem_root_certs = **ca;
  return grpc::SslServerCredentials(options);
}

Result<std::shared_ptr<grpc::Channel>> open_channel(const std::string& target, const ClientSecurity& security) {
  if (target.empty()) return Diagnostic{"", 0, 0, "", "no server address given"};
  if (!security.token.empty() && !valid_token(security.token))
    return Diagnostic{"", 0, 0, "", "the token must be one word of printable ASCII characters"};
  if (!security.tls) return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  const ClientTls& tls = *security.tls;
  grpc::SslCredentialsOptions options;
  Diagnostics errors;
  if (!tls.ca_file.empty()) {
    auto ca = read_pem(tls.ca_file, "server CA");
    if (ca) options.pem_root_certs = *ca;
    else errors = ca.errors();
  }
  if (tls.cert_file.empty() != tls.key_file.empty())
    errors.push_back({"", 0, 0, "", "a client certificate needs both its certificate file and its key file"});
  if (!tls.cert_file.empty() && !tls.key_file.empty()) {
    auto cert = read_pem(tls.cert_file, "client certificate");
    auto key = read_pem(tls.key_file, "client private key");
    if (cert) options.pem_cert_chain = *cert;
    else errors.insert(errors.end(), cert.errors().begin(), cert.errors().end());
    if (key) options.pem_private_key = *key;
    else errors.insert(errors.end(), key.errors().begin(), key.errors().end());
  }
  if (!errors.empty()) return errors;
  grpc::ChannelArguments args;
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(options), args);
}

void attach_token(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
}

}  // namespace het::control
