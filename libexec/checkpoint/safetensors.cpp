#include "checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace het::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is every host we build for");

namespace {

Diagnostic file_error(const std::string& path, const std::string& what) {
  return Diagnostic{path, 0, 0, "", what, ErrorKind::invalid_input};
}
Diagnostic io_error(const std::string& path, const std::string& doing) {
  return Diagnostic{path, 0, 0, "", "cannot " + doing + ": " + std::strerror(errno), ErrorKind::internal};
}

// Writes all n bytes; false with errno on failure.
bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put, n -= std::size_t(put);
  }
  return true;
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Writes `path` through body(fd) (false with errno on failure) to a temporary name, fsync,
// rename, and fsync of the directory: `path` is either as it was or whole.
Result<Done> write_durably(const std::string& path, const std::function<bool(int)>& body) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp, "create the file");
  auto fail = [&](const std::string& doing) {
    Diagnostic d = io_error(tmp, doing);
    ::close(fd);
    ::unlink(tmp.c_str());
    return d;
  };
  if (!body(fd)) return fail("write the file");
  if (::fsync(fd) != 0) return fail("sync the file");
  if (::close(fd) != 0) return io_error(tmp, "close the file");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return io_error(path, "rename " + tmp + " to it");
  return sync_directory(parent_of(path));
}

}  // namespace

std::int64_t elements_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string t;
  for (auto d : shape) t += (t.empty() ? "[" : ", ") + std::to_string(d);
  return t + "]";
}

std::int64_t TensorEntry::elements() const { return elements_of(shape); }

Result<Done> sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(dir, "open the directory");
  const bool ok = ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (!ok) return io_error(dir, "sync the directory");
  return Done{};
}

Result<Done> write(const std::string& path, const std::vector<TensorOut>& tensors, const std::map<std::string, std::string>& metadata,
                   const Progress& progress) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t total = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = std::uint64_t(elements_of(t.shape)) * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {total, total + bytes}}};
    total += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the format recommends
  const std::uint64_t length = text.size();
  return write_durably(path, [&](int fd) {
    if (!write_all(fd, &length, sizeof length) || !write_all(fd, text.data(), text.size())) return false;
    // The data in chunks that end at every kProgressBytes and at half of it, each reported.
    std::uint64_t written = 0;
    const std::uint64_t half = total / 2;
    for (const auto& t : tensors) {
      const char* p = reinterpret_cast<const char*>(t.data);
      const std::uint64_t end = written + std::uint64_t(elements_of(t.shape)) * sizeof(float);
      while (written < end) {
        std::uint64_t stop = std::min(end, (written / kProgressBytes + 1) * kProgressBytes);
        if (written < half && half < stop) stop = half;
        if (!write_all(fd, p, std::size_t(stop - written))) return false;
        p += stop - written, written = stop;
        if (progress && (written % kProgressBytes == 0 || written == half || written == total)) progress(written, total);
      }
    }
    return true;
  });
}

Result<Done> write_file(const std::string& path, const std::string& bytes) {
  return write_durably(path, [&](int fd) { return write_all(fd, bytes.data(), bytes.size()); });
}

Result<Reader> Reader::open(const std::string& path) {
  auto file = input::open_file(path, std::numeric_limits<std::uint64_t>::max());
  if (!file) return file.errors();
  Reader r(std::move(*file));
  std::uint64_t length = 0;
  if (r.file_.size() < 8) return file_error(path, "not a safetensors file: it is shorter than its 8-byte header length");
  if (auto got = r.file_.read_at(0, &length, 8); !got) return got.errors();
  if (length > kMaxHeaderBytes || length > r.file_.size() - 8)
    return file_error(path, "not a safetensors file: its header length " + std::to_string(length) + " is larger than " +
                                (length > kMaxHeaderBytes ? "the format's limit of 100 MB" : "the file"));
  std::string text(length, '\0');
  if (auto got = r.file_.read_at(8, text.data(), length); !got) return got.errors();
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return file_error(path, "not a safetensors file: its header is not a JSON object");
  const std::uint64_t data = 8 + length, data_bytes = r.file_.size() - data;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& entry : header.items()) {
    // Named, not a structured binding: the lambda below captures it (clang before 16 cannot).
    const std::string& name = entry.key();
    const nlohmann::json& t = entry.value();
    if (name == "__metadata__") {
      if (!t.is_object()) return file_error(path, "its __metadata__ is not an object of strings");
      for (const auto& [k, v] : t.items()) {
        if (!v.is_string()) return file_error(path, "its __metadata__ \"" + k + "\" is not a string");
        r.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return file_error(path, "tensor \"" + name + "\": " + why); };
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      return bad("needs dtype, shape and data_offsets");
    if (t["dtype"] != "F32") return bad("dtype " + t["dtype"].dump() + " is not F32, the only one read here");
    TensorEntry e;
    std::uint64_t elements = 1;
    if (!t["shape"].is_array()) return bad("its shape is not a list");
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (std::uint64_t{1} << 40)) return bad("its shape has " + d.dump());
      elements *= d.get<std::uint64_t>();
      if (elements > data_bytes) return bad("its shape holds more elements than the file has bytes");
      e.shape.push_back(d.get<std::int64_t>());
    }
    const auto& o = t["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      return bad("data_offsets is not two offsets");
    const std::uint64_t begin = o[0].get<std::uint64_t>(), end = o[1].get<std::uint64_t>();
    if (begin > end || end > data_bytes) return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] lie outside the file's " + std::to_string(data_bytes) + " bytes of data");
    if (end - begin != elements * sizeof(float))
      return bad("data_offsets hold " + std::to_string(end - begin) + " bytes, its shape " + std::to_string(elements * sizeof(float)));
    e.begin = data + begin, e.end = data + end;
    spans.emplace_back(begin, end);
    r.tensors_[name] = std::move(e);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) return file_error(path, "two tensors' data_offsets overlap");
  return r;
}

Result<Done> Reader::read(const std::string& name, std::int64_t first, std::int64_t n, float* out) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return file_error(path(), "has no tensor \"" + name + "\"");
  if (first < 0 || n < 0 || first + n > it->second.elements())
    return file_error(path(), "tensor \"" + name + "\" has " + std::to_string(it->second.elements()) + " elements, not [" +
                                  std::to_string(first) + ", " + std::to_string(first + n) + ")");
  return file_.read_at(it->second.begin + std::uint64_t(first) * sizeof(float), out, std::size_t(n) * sizeof(float));
}

}  // namespace het::checkpoint
