#include "data/data.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "input/input.hpp"

namespace het::data {

Result<std::vector<std::uint16_t>> read_tokens(const std::string& path) {
  auto in = input::open_file(path, kMaxTokenFileBytes);
  if (!in) return in.errors();
  std::int32_t header[256] = {};
  auto got = in->read(header, sizeof header);
  if (!got) return got.errors();
  if (*got < sizeof header) return Diagnostic{path, 0, 0, "", "too short for an llm.c token file (it needs a 1024-byte header)"};
  if (header[0] != kMagic)
    return Diagnostic{path, 0, 0, "header[0]", "magic " + std::to_string(header[0]) + ", expected 20240520 (llm.c tokens)"};
  if (header[1] != 1) return Diagnostic{path, 0, 0, "header[1]", "version " + std::to_string(header[1]) + ", expected 1"};
  if (header[2] < 0) return Diagnostic{path, 0, 0, "header[2]", "negative token count"};
  // The file's size first: a header promising more tokens than the file holds allocates nothing.
  if (in->size() < sizeof header + 2 * std::uint64_t(header[2]))
    return Diagnostic{path, 0, 0, "", "the header promises " + std::to_string(header[2]) + " tokens; the file holds fewer"};
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(header[2]));
  got = in->read(tokens.data(), tokens.size() * 2);
  if (!got) return got.errors();
  if (*got < tokens.size() * 2)
    return Diagnostic{path, 0, 0, "", "the header promises " + std::to_string(header[2]) + " tokens; the file holds fewer"};
  return tokens;
}

std::string write_tokens(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  std::int32_t header[256] = {};
  header[0] = kMagic, header[1] = 1, header[2] = static_cast<std::int32_t>(tokens.size());
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  out.close();
  return out ? "" : "cannot write " + path;
}

std::vector<std::uint16_t> byte_tokens(const std::string& text) {
  std::vector<std::uint16_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

Batches::Batches(std::vector<std::uint16_t> tokens, int seq_length) : tokens_(std::move(tokens)), T_(seq_length) {}

Batches Batches::synthetic(int vocab, int seq_length, std::uint64_t seed, std::size_t length) {
  std::vector<std::uint16_t> t(length);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<std::uint16_t>(x % std::uint64_t(vocab));
  }
  return Batches(std::move(t), seq_length);
}

void Batches::sequence(int step, int global_batch, int index, int* inputs, int* targets) const {
  const std::size_t span = tokens_.size() - std::size_t(T_) - 1;
  const std::size_t start = ((std::size_t(step) * global_batch + std::size_t(index)) * std::size_t(T_)) % span;
  for (int t = 0; t < T_; ++t) inputs[t] = tokens_[start + t], targets[t] = tokens_[start + t + 1];
}

int Batches::max_token() const { return tokens_.empty() ? 0 : *std::max_element(tokens_.begin(), tokens_.end()); }

}  // namespace het::data
