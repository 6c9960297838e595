#include "digest/digest.hpp"

#include <openssl/evp.h>

namespace het {

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // One call with the built-in algorithm: it fails only when memory runs out.
  if (EVP_Digest(bytes.data(), bytes.size(), md, &size, EVP_sha256(), nullptr) != 1) return std::string();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) out += {kHex[md[i] >> 4], kHex[md[i] & 15]};
  return out;
}

}  // namespace het
