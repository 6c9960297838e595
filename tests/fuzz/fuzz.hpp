#pragma once
// What the libFuzzer harnesses share: the input as text, a property that must hold (else the
// harness aborts, which libFuzzer reports as a crash and keeps the input), and the round trip
// "what a reader accepted, its writer writes and the reader reads back to the same text".
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "diag/diag.hpp"
#include "input/input.hpp"

namespace het::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Aborts with `what` and `detail` on stderr unless `ok`.
inline void require(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  std::fprintf(stderr, "fuzz: property violated: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// A refusal must say why, naming the file: every diagnostic has a message and the file.
inline void require_explained(const Diagnostics& errors, const std::string& file) {
  require(!errors.empty(), "a refusal carries at least one diagnostic");
  for (const auto& d : errors) {
    require(!d.message.empty(), "every diagnostic says what is wrong", d.to_string());
    require(d.file == file, "every diagnostic names the file", d.to_string());
  }
}

// `written` (a writer's text for what a reader accepted) read back by `read` (text, name ->
// Result<T>) and written again by `write` (T -> text) must give the same text.
template <class Read, class Write>
void require_round_trip(const std::string& written, Read read, Write write, const char* what) {
  auto doc = input::parse(written, "written");
  require(doc.ok(), what, "the written text does not parse:\n" + (doc ? "" : to_string(doc.errors())) + "\n" + written);
  auto again = read(*doc);
  require(again.ok(), what, "the written text is refused:\n" + (again ? "" : to_string(again.errors())) + "\n" + written);
  const std::string rewritten = write(*again);
  require(rewritten == written, what, "written:\n" + written + "\nread back and written again:\n" + rewritten);
}

}  // namespace het::fuzz
