#pragma once
// Digests of file contents, to name which file a plan was made with (its profiles).
#include <string>
#include <string_view>

namespace het {

// The SHA-256 of `bytes` as 64 lowercase hex digits, as `sha256sum` prints it.
std::string sha256_hex(std::string_view bytes);

}  // namespace het
