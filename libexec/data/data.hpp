#pragma once
// Training data: llm.c token files (a header of 256 int32 — magic 20240520, version 1,
// token count — then uint16 tokens), byte-level tokenisation of text, and a deterministic
// synthetic stream. Batches are addressed by (step, sequence index in the global batch), so
// every rank of every plan reads exactly the sequences a single device would.
#include <cstdint>
#include <string>
#include <vector>

#include "diag/diag.hpp"

namespace het::data {

inline constexpr std::int32_t kMagic = 20240520;

// The largest token file read: the format's own, a 1024-byte header whose token count is an
// int32 (4 GiB of tokens). Every rank holds its data in memory.
inline constexpr std::uint64_t kMaxTokenFileBytes = 1024 + 2 * std::uint64_t{INT32_MAX};
// The largest text prepare-data tokenises: it holds the text and its tokens (3 bytes a
// byte) in memory; 1 GiB of text is 3 GiB.
inline constexpr std::uint64_t kMaxTextBytes = std::uint64_t{1} << 30;

// Reads an llm.c token file (a regular file, at most kMaxTokenFileBytes; input::open_file).
Result<std::vector<std::uint16_t>> read_tokens(const std::string& path);
// Errors as a sentence (empty on success).
std::string write_tokens(const std::string& path, const std::vector<std::uint16_t>& tokens);
// One token per byte (vocabulary 256).
std::vector<std::uint16_t> byte_tokens(const std::string& text);

class Batches {
 public:
  // From tokens (at least seq_length + 2 of them, each < vocab).
  Batches(std::vector<std::uint16_t> tokens, int seq_length);
  // A deterministic pseudo-random stream over `vocab` tokens.
  static Batches synthetic(int vocab, int seq_length, std::uint64_t seed, std::size_t length = 1 << 16);

  // Sequence `index` of the global batch of `step`: inputs[T] and targets[T] (the next tokens).
  void sequence(int step, int global_batch, int index, int* inputs, int* targets) const;
  int max_token() const;

 private:
  std::vector<std::uint16_t> tokens_;
  int T_;
};

}  // namespace het::data
