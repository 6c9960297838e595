#include "checkpoint/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "input/input.hpp"

namespace het::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "hetexec checkpoint";
constexpr int kVersion = 1;
// The longest manifest read (a manifest holds a few spans per tensor: far less).
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 30;

std::string padded(int n, int width) {
  std::string s = std::to_string(n);
  return std::string(std::size_t(std::max(0, width - int(s.size()))), '0') + s;
}

Diagnostic io_error(const std::string& path, const std::string& doing, const std::error_code& ec) {
  return Diagnostic{path, 0, 0, "", "cannot " + doing + ": " + ec.message(), ErrorKind::internal};
}

nlohmann::json to_json(const std::vector<Span>& spans) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : spans) a.push_back({s.start, s.run, s.stride, s.count});
  return a;
}

// The step N of a directory named as `pattern` names them (step-N, .step-N.partial), or nullopt.
const std::regex kComplete("step-([0-9]{8,9})"), kPartial("\\.step-([0-9]{8,9})\\.partial");
std::optional<int> step_of(const std::string& name, const std::regex& pattern) {
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  return std::stoi(m[1]);
}

// The ranks' write_rank() answers as a manifest's "files", "tensors" and "bytes".
nlohmann::json merge(const std::vector<nlohmann::json>& ranks) {
  nlohmann::json files = nlohmann::json::array(), tensors = nlohmann::json::object();
  std::uint64_t bytes = 0;
  for (const auto& r : ranks) {
    bytes += r["bytes"].get<std::uint64_t>();
    if (r["file"].get<std::string>().empty()) continue;
    const int file = int(files.size());
    files.push_back(r["file"]);
    for (const auto& [name, t] : r["tensors"].items()) {
      auto& into = tensors[name];
      into["shape"] = t["shape"];
      for (auto piece : t["pieces"]) {
        piece["file"] = std::uint64_t(file);
        into["pieces"].push_back(piece);
      }
    }
  }
  return {{"files", files}, {"tensors", tensors}, {"bytes", bytes}};
}

}  // namespace

std::vector<Span> spans_of(const model::Slice& slice, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
  std::vector<Span> out;
  auto add = [&](std::int64_t g, std::int64_t n) {  // a contiguous run [g, g + n) of the full tensor
    if (!out.empty()) {
      Span& s = out.back();
      if (s.count == 1 && g == s.start + s.run) {  // continues the one run (a span of one run has stride = run)
        s.run += n, s.stride = s.run;
        return;
      }
      if (n == s.run && (s.count == 1 ? g > s.start : g == s.start + s.count * s.stride)) {  // the next run at the same distance
        if (s.count == 1) s.stride = g - s.start;
        ++s.count;
        return;
      }
    }
    out.push_back({g, n, n, 1});
  };
  for (auto [first, n] : ranges)
    for (std::int64_t i = first; i < first + n;) {  // split where the shard's rows end
      const std::int64_t k = std::min(first + n - i, slice.cols - i % slice.cols);
      add(slice.global(i), k);
      i += k;
    }
  return out;
}

std::string step_dir(const std::string& root, int step) { return (fs::path(root) / ("step-" + padded(step, 8))).string(); }
std::string partial_dir(const std::string& root, int step) { return (fs::path(root) / (".step-" + padded(step, 8) + ".partial")).string(); }
std::string rank_file(int rank) { return "rank-" + padded(rank, 5) + ".safetensors"; }

Result<nlohmann::json> write_rank(const std::string& root, int step, int rank, const std::vector<PieceOut>& pieces,
                                  const Progress& progress) {
  const std::string dir = partial_dir(root, step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error(dir, "create the checkpoint directory", ec);
  nlohmann::json tensors = nlohmann::json::object();
  std::vector<TensorOut> out;
  std::map<std::string, int> seen;  // pieces per tensor, for their keys
  std::uint64_t bytes = 0;
  for (const auto& p : pieces) {
    const std::string key = p.tensor + ":" + std::to_string(seen[p.tensor]++);
    const std::int64_t n = std::int64_t(p.value.size());
    for (auto [field, data] : {std::pair{"value", &p.value}, std::pair{"m", &p.m}, std::pair{"v", &p.v}})
      out.push_back({key + ":" + field, {n}, data->data()});
    bytes += 3 * std::uint64_t(n) * sizeof(float);
    auto& t = tensors[p.tensor];
    t["shape"] = p.shape;
    t["pieces"].push_back({{"key", key}, {"spans", to_json(p.spans)}});
  }
  std::string file;
  if (!out.empty()) {
    file = rank_file(rank);
    if (auto written = write((fs::path(dir) / file).string(), out, {{"format", kFormat}, {"rank", std::to_string(rank)}}, progress);
        !written)
      return written.errors();
  }
  return nlohmann::json{{"file", file}, {"bytes", bytes}, {"tensors", tensors}};
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto step = step_of(e.path().filename().string(), kComplete);
    if (step && fs::is_regular_file(e.path() / "manifest.json", ec)) found.emplace_back(*step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

Result<Committed> commit(const std::string& root, int step, const nlohmann::json& about, const std::vector<nlohmann::json>& ranks,
                         int keep) {
  nlohmann::ordered_json manifest{{"format", kFormat}, {"version", kVersion}, {"step", step}};
  for (const auto& [k, v] : about.items()) manifest[k] = v;
  const nlohmann::json merged = merge(ranks);
  const std::uint64_t bytes = merged["bytes"].get<std::uint64_t>();
  manifest["bytes"] = bytes;
  manifest["files"] = merged["files"];
  manifest["tensors"] = merged["tensors"];
  const std::string partial = partial_dir(root, step), final_dir = step_dir(root, step);
  if (auto w = write_file((fs::path(partial) / "manifest.json").string(), manifest.dump(1) + "\n"); !w) return w.errors();
  if (auto s = sync_directory(partial); !s) return s.errors();
  std::error_code ec;
  if (fs::exists(final_dir, ec)) fs::remove_all(final_dir, ec);  // an older run's checkpoint of the same step
  fs::rename(partial, final_dir, ec);
  if (ec) return io_error(final_dir, "rename " + partial + " to it", ec);
  if (auto s = sync_directory(root); !s) return s.errors();
  // What is no longer needed: checkpoints beyond the newest `keep`, partial ones up to this step.
  const auto complete = complete_checkpoints(root);
  if (keep > 0)
    for (std::size_t i = 0; i + std::size_t(keep) < complete.size(); ++i) fs::remove_all(complete[i], ec);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto s = step_of(e.path().filename().string(), kPartial);
    if (s && *s <= step) fs::remove_all(e.path(), ec);
  }
  return Committed{final_dir, bytes};
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  std::error_code ec;
  std::string dir = path;
  if (!fs::is_regular_file(fs::path(path) / "manifest.json", ec)) {
    if (!fs::is_directory(path, ec)) return Diagnostic{path, 0, 0, "", "no checkpoint here: not a directory"};
    const auto complete = complete_checkpoints(path);
    if (complete.empty()) return Diagnostic{path, 0, 0, "", "no checkpoint here: neither a manifest.json nor a complete step-N directory"};
    dir = complete.back();
  }
  const std::string file = (fs::path(dir) / "manifest.json").string();
  auto text = input::read_file(file, kMaxManifestBytes);
  if (!text) return text.errors();
  return parse(dir, nlohmann::json::parse(*text, nullptr, false), file, {});
}

Result<Checkpoint> Checkpoint::parse(const std::string& dir, nlohmann::json manifest, const std::string& file,
                                     const std::vector<int>& preference) {
  Checkpoint c;
  c.dir_ = dir;
  c.manifest_ = std::move(manifest);
  auto bad = [&](const std::string& field, const std::string& why) { return Diagnostic{file, 0, 0, field, why}; };
  const auto& m = c.manifest_;
  if (m.is_discarded() || !m.is_object()) return bad("", "not a JSON object");
  if (!m.contains("format") || m["format"] != kFormat) return bad("format", "is not \"" + std::string(kFormat) + "\"");
  if (!m.contains("version") || m["version"] != kVersion) return bad("version", "is not " + std::to_string(kVersion) + ", the one this hetexec reads");
  if (!m.contains("step") || !m["step"].is_number_unsigned() || m["step"].get<std::uint64_t>() > (1u << 30)) return bad("step", "is not a step number");
  c.step_ = m["step"].get<int>();
  if (!m.contains("files") || !m["files"].is_array()) return bad("files", "is not a list of file names");
  for (std::size_t i = 0; i < m["files"].size(); ++i) {
    const auto& f = m["files"][i];
    const std::string field = "files[" + std::to_string(i) + "]";
    if (!f.is_string() || f.get<std::string>().empty() || f.get<std::string>().find('/') != std::string::npos)
      return bad(field, "is not a file name in the checkpoint's directory");
    auto reader = Reader::open((fs::path(dir) / f.get<std::string>()).string());
    if (!reader) return reader.errors();
    c.files_.push_back(std::make_shared<Reader>(std::move(*reader)));
  }
  c.elements_read_.assign(c.files_.size(), 0);
  if (!m.contains("tensors") || !m["tensors"].is_object()) return bad("tensors", "is not an object of tensors");
  for (const auto& [name, t] : m["tensors"].items()) {
    const std::string at = "tensors." + name;
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array() || t["shape"].empty() || t["shape"].size() > 2)
      return bad(at + ".shape", "is not the shape of a vector or a matrix");
    std::int64_t total = 1;
    std::vector<std::int64_t> shape;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() == 0 || d.get<std::uint64_t>() > (std::uint64_t{1} << 40))
        return bad(at + ".shape", "has " + d.dump());
      shape.push_back(d.get<std::int64_t>());
      total *= shape.back();
      if (total > (std::int64_t{1} << 40)) return bad(at + ".shape", "is too large");
    }
    c.shapes_[name] = shape;
    if (!t.contains("pieces") || !t["pieces"].is_array()) return bad(at + ".pieces", "is not a list");
    auto& stored = c.stored_[name];
    for (std::size_t i = 0; i < t["pieces"].size(); ++i) {
      const auto& p = t["pieces"][i];
      const std::string pat = at + ".pieces[" + std::to_string(i) + "]";
      if (!p.is_object() || !p.contains("file") || !p["file"].is_number_unsigned() || p["file"].get<std::uint64_t>() >= c.files_.size())
        return bad(pat + ".file", "is not the index of a file in files");
      if (!p.contains("key") || !p["key"].is_string()) return bad(pat + ".key", "is not a string");
      if (!p.contains("spans") || !p["spans"].is_array()) return bad(pat + ".spans", "is not a list of spans");
      const int f = p["file"].get<int>();
      const std::string key = p["key"].get<std::string>();
      std::int64_t at_piece = 0;
      for (const auto& s : p["spans"]) {
        if (!s.is_array() || s.size() != 4 || !std::all_of(s.begin(), s.end(), [](const auto& x) { return x.is_number_unsigned(); }))
          return bad(pat + ".spans", "holds " + s.dump() + ", not [start, run, stride, count]");
        const Span sp{s[0].get<std::int64_t>(), s[1].get<std::int64_t>(), s[2].get<std::int64_t>(), s[3].get<std::int64_t>()};
        if (sp.run <= 0 || sp.count <= 0 || sp.start < 0 || sp.start > total || sp.run > total || sp.count > total ||
            (sp.count > 1 && sp.stride < sp.run) || sp.stride > total || sp.start + (sp.count - 1) * sp.stride + sp.run > total)
          return bad(pat + ".spans", s.dump() + " lies outside the tensor's " + std::to_string(total) + " elements");
        for (std::int64_t k = 0; k < sp.count; ++k) {
          stored.push_back({sp.start + k * sp.stride, sp.run, f, key, at_piece});
          at_piece += sp.run;
        }
      }
      for (const char* field : {"value", "m", "v"}) {
        const auto& tensors = c.files_[std::size_t(f)]->tensors();
        const auto it = tensors.find(key + ":" + field);
        if (it == tensors.end() || it->second.elements() != at_piece)
          return bad(pat, c.files_[std::size_t(f)]->path() + " has no tensor \"" + key + ":" + field + "\" of " + std::to_string(at_piece) +
                              " elements");
      }
    }
    if (!preference.empty()) stored = choose(std::move(stored), preference);
    std::sort(stored.begin(), stored.end(), [](const Stored& a, const Stored& b) { return a.start < b.start; });
    std::int64_t covered = 0;
    for (const auto& s : stored) {
      if (s.start != covered)
        return bad(at, s.start < covered ? "two pieces hold element " + std::to_string(s.start)
                                         : "no piece holds elements [" + std::to_string(covered) + ", " + std::to_string(s.start) + ")");
      covered += s.n;
    }
    if (covered != total) return bad(at, "its pieces hold " + std::to_string(covered) + " of its " + std::to_string(total) + " elements");
  }
  return c;
}

Result<Done> Checkpoint::read(const std::string& tensor, const std::vector<std::int64_t>& shape, Field field, const std::vector<Span>& spans,
                              float* out) const {
  const auto it = shapes_.find(tensor);
  if (it == shapes_.end()) return Diagnostic{dir_, 0, 0, "", "the checkpoint has no tensor \"" + tensor + "\": it is of another model"};
  if (it->second != shape)
    return Diagnostic{dir_, 0, 0, "", "tensor \"" + tensor + "\" is " + shape_text(it->second) + " in the checkpoint, " + shape_text(shape) +
                                          " in this model: it is of another model"};
  const auto& stored = stored_.at(tensor);
  const char* suffix = field == Field::value ? ":value" : field == Field::m ? ":m" : ":v";
  for (const auto& sp : spans)
    for (std::int64_t k = 0; k < sp.count; ++k)
      for (std::int64_t g = sp.start + k * sp.stride, end = g + sp.run; g < end;) {
        // The stored run holding g: the last one starting at or before it (they tile the tensor).
        auto s = std::upper_bound(stored.begin(), stored.end(), g, [](std::int64_t x, const Stored& r) { return x < r.start; });
        --s;
        const std::int64_t n = std::min(end, s->start + s->n) - g;
        if (auto got = files_[std::size_t(s->file)]->read(s->key + suffix, s->at + (g - s->start), n, out); !got) return got.errors();
        elements_read_[std::size_t(s->file)] += std::uint64_t(n);
        out += n, g += n;
      }
  return Done{};
}

std::vector<Checkpoint::Stored> Checkpoint::choose(std::vector<Stored> runs, const std::vector<int>& preference) {
  std::stable_sort(runs.begin(), runs.end(), [&](const Stored& a, const Stored& b) {
    return preference[std::size_t(a.file)] < preference[std::size_t(b.file)];
  });
  std::map<std::int64_t, std::int64_t> covered;  // start -> end, disjoint
  std::vector<Stored> out;
  for (const auto& r : runs) {
    std::int64_t g = r.start;
    const std::int64_t end = r.start + r.n;
    while (g < end) {
      // The covered interval at or after g (or holding g): skip it; else take up to it.
      auto next = covered.upper_bound(g);
      if (next != covered.begin()) {
        auto prev = std::prev(next);
        if (prev->second > g) {
          g = prev->second;
          continue;
        }
      }
      const std::int64_t stop = next == covered.end() ? end : std::min(end, next->first);
      out.push_back({g, stop - g, r.file, r.key, r.at + (g - r.start)});
      covered[g] = stop;
      g = stop;
    }
  }
  return out;
}

Result<Done> write_rescue(const std::string& dir, int step, int rank, const std::string& holder, const nlohmann::json& about,
                          const std::vector<PieceOut>& pieces) {
  auto answer = write_rank(dir, step, rank, pieces);
  if (!answer) return answer.errors();
  const nlohmann::json record{{"step", step}, {"holder", holder}, {"about", about}, {"answer", *answer}};
  return write_file((fs::path(dir) / ("rank-" + padded(rank, 5) + ".json")).string(), record.dump() + "\n");
}

std::optional<Checkpoint> Checkpoint::open_rescue(const std::string& dir, const std::map<std::string, std::vector<std::int64_t>>& tensors,
                                                  const std::function<int(const std::string& holder)>& preference) {
  static const std::regex kRecord("rank-([0-9]{5,9})\\.json");
  struct Record {
    int rank;
    std::string holder;
    nlohmann::json about, answer;
  };
  std::map<int, std::vector<Record>> by_step;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, kRecord)) continue;
    auto text = input::read_file(e.path().string(), kMaxManifestBytes);
    if (!text) continue;
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_unsigned() || !j.contains("holder") || !j["holder"].is_string() ||
        !j.contains("answer") || !j["answer"].is_object() || !j["answer"].contains("file") || !j["answer"]["file"].is_string() ||
        !j["answer"].contains("bytes") || !j["answer"]["bytes"].is_number_unsigned() || !j["answer"].contains("tensors") ||
        !j["answer"]["tensors"].is_object())
      continue;
    bool well_formed = true;  // what merge() reads: {name: {"shape", "pieces": [{...}, ...]}}
    for (const auto& t : j["answer"]["tensors"])
      well_formed = well_formed && t.is_object() && t.contains("shape") && t.contains("pieces") && t["pieces"].is_array() &&
                    std::all_of(t["pieces"].begin(), t["pieces"].end(), [](const auto& p) { return p.is_object(); });
    if (!well_formed) continue;
    by_step[j["step"].get<int>()].push_back({std::stoi(m[1].str()), j["holder"], j.value("about", nlohmann::json::object()), j["answer"]});
  }
  for (auto it = by_step.rbegin(); it != by_step.rend(); ++it) {
    auto& records = it->second;
    std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) { return a.rank < b.rank; });
    std::vector<nlohmann::json> answers;
    nlohmann::json holders = nlohmann::json::array();
    std::vector<int> order;
    for (const auto& r : records)
      if (!r.answer["file"].get<std::string>().empty()) {
        answers.push_back(r.answer);
        holders.push_back(r.holder);
        order.push_back(preference(r.holder));
      }
    if (answers.empty()) continue;
    nlohmann::json manifest = records.front().about.is_object() ? records.front().about : nlohmann::json::object();
    const nlohmann::json merged = merge(answers);
    manifest["format"] = kFormat, manifest["version"] = kVersion, manifest["step"] = std::uint64_t(it->first);
    manifest["files"] = merged["files"], manifest["tensors"] = merged["tensors"], manifest["bytes"] = merged["bytes"];
    manifest["holders"] = holders;
    const std::string at = partial_dir(dir, it->first);
    auto c = parse(at, manifest, at, order);
    if (!c) continue;  // a tensor's elements not all held at this step
    bool whole = true;
    for (const auto& [name, shape] : tensors) {
      auto s = c->shapes_.find(name);
      whole = whole && s != c->shapes_.end() && s->second == shape;
    }
    if (whole) return std::move(*c);
  }
  return std::nullopt;
}

}  // namespace het::checkpoint
