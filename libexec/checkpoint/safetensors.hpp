#pragma once
// The safetensors format (github.com/huggingface/safetensors, "Format"): 8 bytes, the header's
// length N as a little-endian uint64; N bytes of JSON, an object whose keys are tensor names,
// each {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (byte offsets into the data,
// which follows the header), and an optional "__metadata__" object of strings; then the data,
// little-endian. Only F32 tensors are written and read here (fp32 masters and AdamW moments).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "input/input.hpp"

namespace het::checkpoint {

// The longest header read: the format's own limit (100 MB, safetensors' MAX_HEADER_SIZE).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// The number of elements of a tensor of this shape; "[4, 6]".
std::int64_t elements_of(const std::vector<std::int64_t>& shape);
std::string shape_text(const std::vector<std::int64_t>& shape);

struct TensorOut {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* data = nullptr;  // elements_of(shape) elements
};

// Told how much of the data is written: (bytes written, bytes in all); at least after every
// kProgressBytes, exactly once at half of the data, and at the end.
using Progress = std::function<void(std::uint64_t written, std::uint64_t total)>;
inline constexpr std::uint64_t kProgressBytes = std::uint64_t{64} << 20;

// Writes `tensors` (names unique) to `path`: to path + ".tmp", fsync, rename, so that `path` is
// either absent or whole. Errors name the file.
Result<Done> write(const std::string& path, const std::vector<TensorOut>& tensors, const std::map<std::string, std::string>& metadata,
                   const Progress& progress = {});

struct TensorEntry {
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the file (the data's, plus the header)
  std::int64_t elements() const;
};

// A safetensors file open for reading. Its header is checked whole on opening: valid JSON, every
// tensor F32 with a shape whose size matches its offsets, offsets inside the file and not
// overlapping. Errors name the file and the tensor.
class Reader {
 public:
  static Result<Reader> open(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Elements [first, first + n) of tensor `name` into out[n].
  Result<Done> read(const std::string& name, std::int64_t first, std::int64_t n, float* out) const;

 private:
  explicit Reader(input::InputFile file) : file_(std::move(file)) {}
  input::InputFile file_;
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `bytes` to `path` the same way: temporary name, fsync, rename, fsync of the directory.
Result<Done> write_file(const std::string& path, const std::string& bytes);

// Makes a written file or a renamed directory durable: fsync of the directory holding it.
Result<Done> sync_directory(const std::string& dir);

}  // namespace het::checkpoint
