#include "input/input.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace het::input {
namespace {

// Index of the first byte that makes `text` not UTF-8 text (a NUL or an invalid sequence: an
// overlong form or a surrogate once passed here and made writing a plan's model name throw),
// or npos.
std::size_t first_binary_byte(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = text[i] == 0 ? 0 : utf8_sequence(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

int line_of_offset(std::string_view text, std::size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n'));
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool is_plain_integer(std::string_view s) {
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// What input::to_json() needs of a document, checked at every node with every alias expanded:
// no more than `budget` nodes, and keys whose JSON text yaml-cpp reads back (kMaxKeyBytes).
// yaml-cpp bounds the nesting, and so this recursion.
struct NodeCheck {
  explicit NodeCheck(std::uint64_t max_nodes) : budget(max_nodes) {}
  std::uint64_t budget;
  enum class Problem { none, nodes, key } problem = Problem::none;
  YAML::Node at;  // where the problem is

  bool visit(const YAML::Node& node) {
    if (budget == 0) return fail(Problem::nodes, node);
    --budget;
    if (node.IsSequence())
      for (const auto& child : node)
        if (!visit(child)) return false;
    if (node.IsMap())
      for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node key = it->first;
        if (key.IsScalar() && json_bytes(key.Scalar()) > kMaxKeyBytes) return fail(Problem::key, key);
        if (!visit(key) || !visit(it->second)) return false;
      }
    return true;
  }
  bool fail(Problem p, const YAML::Node& node) {
    problem = p, at = node;
    return false;
  }
  // The bytes of a string as JSON text: quoted, escaped.
  static std::size_t json_bytes(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  }
};

}  // namespace

std::size_t utf8_sequence(std::string_view text, std::size_t at) {
  const auto c = static_cast<unsigned char>(text[at]);
  // The sequence's length and the bounds of its second byte (RFC 3629's table).
  std::size_t len = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (c < 0x80) len = 1;
  else if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, low = 0xA0;
  else if (c == 0xED) len = 3, high = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, low = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) len = 4, high = 0x8F;
  if (len == 0 || at + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[at + k]);
    if (k == 1 ? b < low || b > high : b < 0x80 || b > 0xBF) return 0;
  }
  return len;
}

int line_of(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  auto mark = node.Mark();
  return mark.line >= 0 && !mark.is_null() ? mark.line + 1 : 0;
}

static int column_of(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  auto mark = node.Mark();
  return mark.column >= 0 && !mark.is_null() ? mark.column + 1 : 0;
}

void Context::error(const YAML::Node& at, const std::string& path, std::string message,
                    const YAML::Node& fallback) const {
  const YAML::Node& where = line_of(at) > 0 ? at : fallback;
  sink->push_back({file, line_of(where), column_of(where), path, std::move(message)});
}

Result<Document> parse(std::string_view text, const std::string& name) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
    return Diagnostic{name, 0, 0, "", "the file is empty; expected a YAML or JSON map"};
  if (auto bad = first_binary_byte(text); bad != std::string_view::npos)
    return Diagnostic{name, line_of_offset(text, bad), 0, "",
                      "the file is not UTF-8 text (binary data at byte " + std::to_string(bad) +
                          "); expected a YAML or JSON map"};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Diagnostic{name, e.mark.is_null() ? 0 : e.mark.line + 1, e.mark.is_null() ? 0 : e.mark.column + 1, "",
                      "syntax error: " + e.msg};
  }
  if (!root.IsMap()) {
    if (root.IsNull()) return Diagnostic{name, 0, 0, "", "the file holds no data (only comments?); expected a map"};
    return Diagnostic{name, line_of(root), column_of(root), "", "expected a map of fields at the top, got " + describe(root)};
  }
  const std::uint64_t max_nodes = kMaxNodesPerByte * text.size() + kExtraNodes;
  NodeCheck check(max_nodes);
  if (check.visit(root)) return Document{name, root};
  if (check.problem == NodeCheck::Problem::key)
    return Diagnostic{name, line_of(check.at), column_of(check.at), "",
                      "a key of " + std::to_string(check.at.Scalar().size()) + " bytes: keys are at most " +
                          std::to_string(kMaxKeyBytes) + " bytes as JSON writes them (quoted, escaped), the most YAML reads back"};
  return Diagnostic{name, line_of(check.at), column_of(check.at), "",
                    "its aliases (*name) repeat nodes past " + std::to_string(max_nodes) + " (" +
                        std::to_string(kMaxNodesPerByte) + " a byte of the file, and " + std::to_string(kExtraNodes) +
                        "); write the repeated parts out"};
  return Document{name, root};
}

namespace {

// Why a file of this mode is not read, or "" for a regular file.
std::string not_regular(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "cannot read the file: it is a directory";
  const char* kind = S_ISFIFO(mode)  ? "a FIFO"
                     : S_ISCHR(mode) ? "a character device"
                     : S_ISBLK(mode) ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "not a file";
  return std::string("cannot read the file: it is not a regular file (") + kind + ")";
}

Diagnostic too_large(const std::string& path, std::uint64_t max_bytes) {
  return Diagnostic{path, 0, 0, "", "cannot read the file: it is larger than " + std::to_string(max_bytes) + " bytes"};
}

}  // namespace

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_), fd_ = std::exchange(other.fd_, -1), size_ = other.size_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::size_t> InputFile::read(void* into, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd_, static_cast<char*>(into) + done, std::min<std::size_t>(n - done, std::size_t{1} << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Diagnostic{path_, 0, 0, "", std::string("cannot read the file: ") + std::strerror(errno)};
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

Result<Done> InputFile::read_at(std::uint64_t offset, void* into, std::size_t n) const {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, static_cast<char*>(into) + done, std::min<std::size_t>(n - done, std::size_t{1} << 30),
                                off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Diagnostic{path_, 0, 0, "", std::string("cannot read the file: ") + std::strerror(errno)};
    if (got == 0)
      return Diagnostic{path_, 0, 0, "", "cannot read the file: it ends at byte " + std::to_string(offset + done) + ", before byte " +
                                             std::to_string(offset + n)};
    done += static_cast<std::size_t>(got);
  }
  return Done{};
}

Result<InputFile> open_file(const std::string& path, std::uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Diagnostic{path, 0, 0, "", std::string("cannot open the file: ") + std::strerror(errno)};
  if (auto why = not_regular(st.st_mode); !why.empty()) return Diagnostic{path, 0, 0, "", why};
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once
  // (and the fstat below refuses it) instead of waiting for a writer. A regular file ignores it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Diagnostic{path, 0, 0, "", std::string("cannot open the file: ") + std::strerror(errno)};
  InputFile file(path, fd, 0);
  if (::fstat(fd, &st) != 0) return Diagnostic{path, 0, 0, "", std::string("cannot open the file: ") + std::strerror(errno)};
  if (auto why = not_regular(st.st_mode); !why.empty()) return Diagnostic{path, 0, 0, "", why};
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return too_large(path, max_bytes);
  file.size_ = static_cast<std::uint64_t>(st.st_size);
  return file;
}

Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes) {
  auto file = open_file(path, max_bytes);
  if (!file) return file.errors();
  // Up to the size it had when opened, then one byte more: a file that grew past the cap
  // (or one whose size stat does not tell, as in /proc) is refused, not read on.
  std::string text;
  std::size_t want = static_cast<std::size_t>(file->size()) + 1;
  for (;;) {
    const std::size_t at = text.size();
    text.resize(at + want);
    auto got = file->read(text.data() + at, want);
    if (!got) return got.errors();
    text.resize(at + *got);
    if (text.size() > max_bytes) return too_large(path, max_bytes);
    if (*got < want) return text;
    want = std::max<std::size_t>(want, 1 << 16);
  }
}

Result<Document> load(const std::string& path) {
  auto text = read_file(path);
  if (!text) return text.errors();
  return parse(*text, path);
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  std::string s = node.Scalar();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return "'" + s + "'";
}

nlohmann::ordered_json to_json(const YAML::Node& node) {
  using Json = nlohmann::ordered_json;
  if (node.IsMap()) {
    Json j = Json::object();
    for (auto it = node.begin(); it != node.end(); ++it) j[it->first.Scalar()] = to_json(it->second);
    return j;
  }
  if (node.IsSequence()) {
    Json j = Json::array();
    for (const auto& e : node) j.push_back(to_json(e));
    return j;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted
  const auto same_text = [&](const Json& j) { return j.dump() == s; };
  if (s == "true" || s == "false") return s == "true";
  std::int64_t i = 0;
  if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
      ec == std::errc() && end == s.data() + s.size() && same_text(Json(i)))
    return i;
  double d = 0;
  if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
      ec == std::errc() && end == s.data() + s.size() && std::isfinite(d) && same_text(Json(d)))
    return d;
  return s;
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string index(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::optional<std::string> as_string(const Context& ctx, const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar() || node.Scalar().empty()) {
    ctx.error(node, path, "expected a text value, got " + describe(node));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<std::int64_t> as_integer(const Context& ctx, const YAML::Node& node, const std::string& path,
                                       std::int64_t min, std::int64_t max) {
  if (!node.IsScalar() || !is_plain_integer(node.Scalar())) {
    ctx.error(node, path, "expected a whole number, got " + describe(node));
    return std::nullopt;
  }
  std::string_view s = node.Scalar();
  if (s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < min || v > max) {
    std::string range = max == INT32_MAX || max == std::numeric_limits<std::int64_t>::max()
                            ? "at least " + std::to_string(min)
                            : "between " + std::to_string(min) + " and " + std::to_string(max);
    ctx.error(node, path, "expected a whole number " + range + ", got " + describe(node));
    return std::nullopt;
  }
  return v;
}

std::optional<std::int64_t> as_integer(const Context& ctx, const YAML::Node& node, const std::string& path,
                                       std::int64_t min, Limit limit) {
  if (!node.IsScalar() || !is_plain_integer(node.Scalar())) {
    ctx.error(node, path, "expected a whole number, got " + describe(node));
    return std::nullopt;
  }
  std::string_view s = node.Scalar();
  if (s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool negative = s.front() == '-';
  if (ec == std::errc::result_out_of_range) v = negative ? std::numeric_limits<std::int64_t>::min() : std::numeric_limits<std::int64_t>::max();
  if (v < min) {
    ctx.error(node, path, "expected a whole number at least " + std::to_string(min) + ", got " + describe(node));
    return std::nullopt;
  }
  if (v > limit.max) {
    ctx.error(node, path, "expected a whole number at most " + std::to_string(limit.max) + " (the limit on " + limit.what +
                              "), got " + describe(node));
    return std::nullopt;
  }
  return v;
}

std::optional<double> as_number(const Context& ctx, const YAML::Node& node, const std::string& path, double min,
                                double max) {
  double v = 0;
  if (node.IsScalar()) {
    std::string_view s = node.Scalar();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && std::isfinite(v) && v >= min && v <= max) return v;
  }
  std::ostringstream range;
  range << "a number between " << min << " and " << max;
  ctx.error(node, path, "expected " + range.str() + ", got " + describe(node));
  return std::nullopt;
}

std::optional<double> as_quantity(const Context& ctx, const YAML::Node& node, const std::string& path,
                                  units::Dimension dimension, bool allow_zero) {
  if (!node.IsScalar()) {
    ctx.error(node, path,
              std::string("expected a ") + units::dimension_name(dimension) + " like " +
                  units::dimension_example(dimension) + ", got " + describe(node));
    return std::nullopt;
  }
  auto parsed = units::parse(node.Scalar(), dimension);
  if (!parsed.ok()) {
    ctx.error(node, path, parsed.error);
    return std::nullopt;
  }
  if (parsed.value < 0 || (!allow_zero && parsed.value == 0)) {
    ctx.error(node, path,
              std::string("expected a ") + (allow_zero ? "non-negative " : "positive ") +
                  units::dimension_name(dimension) + ", got '" + node.Scalar() + "'");
    return std::nullopt;
  }
  return parsed.value;
}

Fields::Fields(const Context& ctx, const YAML::Node& node, std::string path,
               std::initializer_list<std::string_view> allowed)
    : ctx_(ctx), node_(node), path_(std::move(path)) {
  if (!node.IsMap()) {
    ctx_.error(node, path_.empty() ? "(top)" : path_, "expected a map of fields, got " + describe(node));
    return;
  }
  is_map_ = true;
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // A copy (a node is a handle): yaml-cpp's iterator hands out a temporary pair, so a
    // reference to its `first` dangles once this statement ends.
    const YAML::Node key_node = it->first;
    std::string key = key_node.IsScalar() ? key_node.Scalar() : "";
    if (key.empty()) {
      ctx_.error(key_node, path_, "expected a field name, got " + describe(key_node));
      continue;
    }
    if (!seen.insert(key).second) {
      ctx_.error(key_node, join(path_, key), "this field is given twice");
      continue;
    }
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string hint, list;
    std::size_t best = 3;
    for (auto a : allowed) {
      list += (list.empty() ? "" : ", ") + std::string(a);
      // A close spelling, or the key being the start of a field name (vocab -> vocab_size).
      std::size_t d = a.rfind(key, 0) == 0 ? 1 : edit_distance(key, a);
      if (d < best) best = d, hint = std::string(a);
    }
    ctx_.error(key_node, join(path_, key),
               "unknown field" + (hint.empty() ? std::string() : "; did you mean '" + hint + "'?") +
                   " (allowed here: " + list + ")");
  }
}

bool Fields::has(std::string_view key) const { return is_map_ && node_[std::string(key)].IsDefined(); }

YAML::Node Fields::get(std::string_view key) const {
  if (!is_map_) return YAML::Node(YAML::NodeType::Undefined);
  // operator[] on a const node does not insert.
  const YAML::Node& n = node_;
  return n[std::string(key)];
}

std::string Fields::path_of(std::string_view key) const { return join(path_, key); }

bool Fields::present(std::string_view key, Need need) const {
  if (!is_map_) return false;
  if (has(key)) return true;
  if (need == Need::required) ctx_.error(node_, path_of(key), "missing required field");
  return false;
}

void Fields::error(std::string_view key, std::string message) const {
  ctx_.error(get(key), path_of(key), std::move(message), node_);
}

std::optional<std::string> Fields::string(std::string_view key, Need need) const {
  if (!present(key, need)) return std::nullopt;
  return as_string(ctx_, get(key), path_of(key));
}

std::optional<std::int64_t> Fields::integer(std::string_view key, Need need, std::int64_t min,
                                            std::int64_t max) const {
  if (!present(key, need)) return std::nullopt;
  return as_integer(ctx_, get(key), path_of(key), min, max);
}

std::optional<std::int64_t> Fields::integer(std::string_view key, Need need, std::int64_t min, Limit limit) const {
  if (!present(key, need)) return std::nullopt;
  return as_integer(ctx_, get(key), path_of(key), min, limit);
}

std::optional<double> Fields::number(std::string_view key, Need need, double min, double max) const {
  if (!present(key, need)) return std::nullopt;
  return as_number(ctx_, get(key), path_of(key), min, max);
}

std::optional<double> Fields::quantity(std::string_view key, units::Dimension dimension, Need need,
                                       bool allow_zero) const {
  if (!present(key, need)) return std::nullopt;
  return as_quantity(ctx_, get(key), path_of(key), dimension, allow_zero);
}

std::optional<Fields> Fields::map(std::string_view key, Need need,
                                  std::initializer_list<std::string_view> allowed) const {
  if (!present(key, need)) return std::nullopt;
  Fields child(ctx_, get(key), path_of(key), allowed);
  if (!child.is_map()) return std::nullopt;
  return child;
}

std::optional<YAML::Node> Fields::list(std::string_view key, Need need, Limit limit) const {
  if (!present(key, need)) return std::nullopt;
  YAML::Node n = get(key);
  if (!n.IsSequence()) {
    ctx_.error(n, path_of(key), "expected a list, got " + describe(n), node_);
    return std::nullopt;
  }
  if (static_cast<std::int64_t>(n.size()) > limit.max) {
    ctx_.error(n, path_of(key),
               "expected at most " + std::to_string(limit.max) + " entries (the limit on " + limit.what + "), got " +
                   std::to_string(n.size()),
               node_);
    return std::nullopt;
  }
  return n;
}

}  // namespace het::input
