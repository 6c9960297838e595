#pragma once
// Reading user documents (YAML, and JSON, which YAML reads too) with positions, so that
// every problem is reported with its file, line and field path.
//
// load() turns a file into a Document or says why it cannot be read (missing, empty,
// binary, syntax error at line N). A Fields reader then walks one map: it rejects keys that
// are not in the schema (with a "did you mean" hint), and its typed getters report
// missing, mistyped or out-of-range values into a Diagnostics sink and return nullopt,
// so a parser collects all problems of a file in one pass.
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diag/diag.hpp"
#include "units/units.hpp"

namespace het::input {

struct Document {
  std::string file;  // the name used in diagnostics (the path as the user gave it)
  YAML::Node root;   // a map; load() and parse() reject anything else
};

// The most bytes read from a YAML or JSON input (model, cluster, profile, plan, catalog,
// inventory, trace, peer profiles). A plan for the most devices a cluster may have
// (spec/limits.hpp) is ~40 MiB; yaml-cpp holds ~85 bytes per byte of such dense input, so a
// document at this cap takes ~5.5 GiB to parse, and nothing larger is read.
inline constexpr std::uint64_t kMaxDocumentBytes = std::uint64_t{64} << 20;
// The most nodes a document may hold per byte of its text, counted with every alias (`*a`)
// expanded, plus kExtraNodes. A document spelled out holds about one node a byte at most; the
// bound stops aliases of aliases ("billion laughs": 957 bytes once took hetplan validate past
// 4 GiB) from growing what input::to_json() makes of it, while leaving room for aliases in use.
inline constexpr std::uint64_t kMaxNodesPerByte = 4;
inline constexpr std::uint64_t kExtraNodes = 4096;
// The longest key a document may have, as JSON text (quoted, escaped): yaml-cpp reads no longer
// key of a flow map, which is how JSON writes every key (YAML's limit on implicit keys), so a
// longer one, though readable in block style, would make input::to_json()'s text unreadable.
inline constexpr std::size_t kMaxKeyBytes = 1024;

// An input file open for reading: a regular file, never a FIFO (whose open would wait for a
// writer), a device (/dev/zero never ends), a socket or a directory. Move-only; closes itself.
class InputFile {
 public:
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }  // when it was opened
  // Reads up to n bytes into `into`: fewer only at the end of the file. Errors name the file.
  Result<std::size_t> read(void* into, std::size_t n);
  // Reads exactly n bytes at `offset` (the position read() uses is left alone); a file that
  // ends before is an error naming the file.
  Result<Done> read_at(std::uint64_t offset, void* into, std::size_t n) const;

 private:
  friend Result<InputFile> open_file(const std::string& path, std::uint64_t max_bytes);
  InputFile(std::string path, int fd, std::uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Opens `path` for reading: stat first, refusing what is not a regular file; opened without
// blocking (a FIFO swapped in after the stat cannot hang it) and checked again on the open
// descriptor; refused when larger than max_bytes. Errors: "cannot open the file: ...",
// "cannot read the file: it is a directory", "... it is not a regular file (a FIFO)",
// "... it is larger than N bytes".
Result<InputFile> open_file(const std::string& path, std::uint64_t max_bytes);

// The bytes of a file, read through open_file() (a file that grows past max_bytes while
// being read is refused too). Every input of hetplan and hetexec is read through these two.
Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes = kMaxDocumentBytes);
// Reads and parses a file (read_file() with kMaxDocumentBytes). The root must be a map.
Result<Document> load(const std::string& path);
// Parses text already in memory; `name` stands for the file in diagnostics.
Result<Document> parse(std::string_view text, const std::string& name);

// The length of the UTF-8 sequence that starts at text[at] (1 to 4), or 0 when no valid one
// does: UTF-8 as RFC 3629 defines it and JSON writers insist on (no overlong forms, no
// surrogates, nothing past U+10FFFF). Precondition: at < text.size().
std::size_t utf8_sequence(std::string_view text, std::size_t at);

// Where diagnostics go while one document is being read.
struct Context {
  std::string file;
  Diagnostics* sink;

  // Reports a problem located at `at` (or, when `at` has no position, at `fallback`).
  void error(const YAML::Node& at, const std::string& path, std::string message,
             const YAML::Node& fallback = YAML::Node()) const;
};

// 1-based line of a node, 0 when it has none.
int line_of(const YAML::Node& node);

enum class Need { required, optional };

// The name of a YAML node's kind for messages: "a map", "a list", "a string '…'", "nothing".
std::string describe(const YAML::Node& node);

// The largest value a count may take and what it counts, for the message when it is exceeded:
// "expected a whole number at most 1024 (the limit on devices per node), got '5000'", or for
// a list "expected at most 64 entries (the limit on subclusters), got 70" (spec/limits.hpp).
struct Limit {
  std::int64_t max;
  const char* what;
};

// Typed conversions of one node; on failure they report and return nullopt.
std::optional<std::string> as_string(const Context& ctx, const YAML::Node& node, const std::string& path);
std::optional<std::int64_t> as_integer(const Context& ctx, const YAML::Node& node, const std::string& path,
                                       std::int64_t min, std::int64_t max);
// A count of at least `min` and at most limit.max.
std::optional<std::int64_t> as_integer(const Context& ctx, const YAML::Node& node, const std::string& path,
                                       std::int64_t min, Limit limit);
std::optional<double> as_number(const Context& ctx, const YAML::Node& node, const std::string& path,
                                double min, double max);
// A quantity with a unit; `allow_zero` admits 0 (latencies), otherwise it must be > 0.
std::optional<double> as_quantity(const Context& ctx, const YAML::Node& node, const std::string& path,
                                  units::Dimension dimension, bool allow_zero = false);

template <class E>
using Choices = std::initializer_list<std::pair<std::string_view, E>>;

// One of a fixed set of words.
template <class E>
std::optional<E> as_choice(const Context& ctx, const YAML::Node& node, const std::string& path,
                           Choices<E> choices) {
  auto text = as_string(ctx, node, path);
  if (!text) return std::nullopt;
  std::string allowed;
  for (const auto& [word, value] : choices) {
    if (word == *text) return value;
    allowed += (allowed.empty() ? "" : ", ") + std::string(word);
  }
  ctx.error(node, path, "expected one of " + allowed + ", got '" + *text + "'");
  return std::nullopt;
}

// Reads one map of a schema. Construction checks that the node is a map and that every
// key is in `allowed` and appears once.
class Fields {
 public:
  Fields(const Context& ctx, const YAML::Node& node, std::string path,
         std::initializer_list<std::string_view> allowed);

  bool is_map() const { return is_map_; }
  bool has(std::string_view key) const;
  YAML::Node node() const { return node_; }
  YAML::Node get(std::string_view key) const;  // an invalid node when absent
  std::string path_of(std::string_view key) const;
  int line() const { return line_of(node_); }
  const Context& context() const { return ctx_; }

  std::optional<std::string> string(std::string_view key, Need need) const;
  std::optional<std::int64_t> integer(std::string_view key, Need need, std::int64_t min = 1,
                                      std::int64_t max = INT32_MAX) const;
  std::optional<std::int64_t> integer(std::string_view key, Need need, std::int64_t min, Limit limit) const;
  std::optional<double> number(std::string_view key, Need need, double min, double max) const;
  std::optional<double> quantity(std::string_view key, units::Dimension dimension, Need need,
                                 bool allow_zero = false) const;
  template <class E>
  std::optional<E> choice(std::string_view key, Need need, Choices<E> choices) const {
    if (!present(key, need)) return std::nullopt;
    return as_choice(ctx_, get(key), path_of(key), choices);
  }
  // A nested map; nullopt when absent (reported if required) or not a map (reported).
  std::optional<Fields> map(std::string_view key, Need need,
                            std::initializer_list<std::string_view> allowed) const;
  // A list; nullopt when absent (reported if required), not a list or longer than
  // limit.max entries (reported).
  std::optional<YAML::Node> list(std::string_view key, Need need, Limit limit) const;

  // Reports a problem about `key` (at its line, or the map's line when it is absent).
  void error(std::string_view key, std::string message) const;

 private:
  bool present(std::string_view key, Need need) const;  // reports a missing required key

  Context ctx_;
  YAML::Node node_;
  std::string path_;
  bool is_map_ = false;
};

// The node as JSON whose text, read back (JSON reads as YAML), gives every scalar's text
// unchanged, so any reader sees in it what it saw in the YAML: a plain scalar that JSON
// writes with the same text (2048, 1.5, true) becomes a number or boolean, a null stays
// null, and every other scalar (quoted ones, 400us, 1e3, 007) becomes a string.
nlohmann::ordered_json to_json(const YAML::Node& node);

// Child paths: "a" + "b" -> "a.b"; "" + "b" -> "b"; index: "a[3]".
std::string join(const std::string& path, std::string_view key);
std::string index(const std::string& path, std::size_t i);

}  // namespace het::input
