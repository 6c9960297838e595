#include "launch/worker_job.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "input/input.hpp"

namespace het::launch {

namespace {

// A job file is a few hundred bytes; anything near this is not one.
constexpr std::uint64_t kMaxJobFileBytes = 1 << 20;
// The format's version: a worker refuses a file written by another (agents and workers of one
// node are the same binary, so this guards against stale files, not against skew).
constexpr int kVersion = 1;

constexpr std::array<std::string_view, 30> kFields = {
    "version",        "plan",         "model",          "cluster",          "data",            "steps",
    "seed",           "lr",           "backend",        "threads",          "slowdown",        "time_dilation",
    "emulate_links",  "emulate_devices", "world",       "rendezvous",       "host",            "token_file",
    "rendezvous_ca",  "progress_dir", "trace_events",   "traffic_events",   "checkpoint_dir",  "resume",
    "checkpoint_every", "checkpoint_keep", "die_rank",  "die_step",       "rescue_dir",       "rescue_from"};

// Reads one field of `j` into `out`, or records why it cannot.
class Reader {
 public:
  Reader(const nlohmann::json& j, std::string file) : j_(j), file_(std::move(file)) {}

  void text(const char* key, std::string& out, bool required) {
    if (const auto* v = find(key, required)) {
      if (v->is_string()) out = v->get<std::string>();
      else fail(key, "must be a string");
    }
  }
  void text(const char* key, std::optional<std::string>& out) {
    if (const auto* v = find(key, false)) {
      if (v->is_string()) out = v->get<std::string>();
      else fail(key, "must be a string");
    }
  }
  void flag(const char* key, bool& out) {
    if (const auto* v = find(key, false)) {
      if (v->is_boolean()) out = v->get<bool>();
      else fail(key, "must be true or false");
    }
  }
  void integer(const char* key, int& out, bool required) {
    if (const auto* v = find(key, required)) {
      if (v->is_number_unsigned() ? v->get<std::uint64_t>() <= INT32_MAX
                                  : v->is_number_integer() && v->get<std::int64_t>() >= INT32_MIN && v->get<std::int64_t>() <= INT32_MAX)
        out = int(v->get<std::int64_t>());
      else fail(key, "must be an integer");
    }
  }
  void integer(const char* key, std::optional<int>& out) {
    if (find(key, false)) integer(key, out.emplace(), false);
  }
  void unsigned64(const char* key, std::uint64_t& out) {
    if (const auto* v = find(key, false)) {
      if (v->is_number_unsigned()) out = v->get<std::uint64_t>();
      else fail(key, "must be an integer from 0 to 2^64 - 1");
    }
  }
  void number(const char* key, double& out) {
    if (const auto* v = find(key, false)) {
      if (v->is_number()) out = v->get<double>();  // the text as written, correctly rounded
      else fail(key, "must be a number");
    }
  }
  Diagnostics take() { return std::move(errors_); }

 private:
  const nlohmann::json* find(const char* key, bool required) {
    const auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    if (required) fail(key, "is missing");
    return nullptr;
  }
  void fail(const char* key, const std::string& why) { errors_.push_back({file_, 0, 0, key, why}); }
  const nlohmann::json& j_;
  std::string file_;
  Diagnostics errors_;
};

}  // namespace

nlohmann::json to_json(const WorkerJob& w) {
  nlohmann::json j = {{"version", kVersion},
                      {"plan", w.plan},
                      {"steps", w.steps},
                      {"seed", w.seed},
                      {"lr", w.lr},
                      {"backend", w.backend},
                      {"threads", w.threads},
                      {"slowdown", w.slowdown},
                      {"time_dilation", w.time_dilation},
                      {"emulate_links", w.emulate_links},
                      {"emulate_devices", w.emulate_devices},
                      {"world", w.world},
                      {"rendezvous", w.rendezvous},
                      {"host", w.host}};
  for (auto [key, value] : {std::pair{"model", &w.model}, {"cluster", &w.cluster}, {"data", &w.data}, {"token_file", &w.token_file},
                            {"rendezvous_ca", &w.rendezvous_ca}, {"progress_dir", &w.progress_dir},
                            {"trace_events", &w.trace_events}, {"traffic_events", &w.traffic_events},
                            {"checkpoint_dir", &w.checkpoint_dir}, {"resume", &w.resume}, {"rescue_dir", &w.rescue_dir},
                            {"rescue_from", &w.rescue_from}})
    if (*value) j[key] = **value;
  if (w.checkpoint_every) j["checkpoint_every"] = w.checkpoint_every;
  if (w.checkpoint_keep) j["checkpoint_keep"] = w.checkpoint_keep;
  if (w.die_rank) j["die_rank"] = *w.die_rank;
  if (w.die_step) j["die_step"] = *w.die_step;
  return j;
}

Diagnostics check(const WorkerJob& w, const std::string& file) {
  Diagnostics out;
  auto fail = [&](const char* key, const std::string& why) { out.push_back({file, 0, 0, key, why}); };
  if (w.plan.empty()) fail("plan", "must name the plan file");
  if (w.steps < 1) fail("steps", "must be at least 1, not " + std::to_string(w.steps));
  if (!(std::isfinite(w.lr) && w.lr > 0)) fail("lr", "must be a finite number above 0");
  if (w.backend != "cpu" && w.backend != "cuda") fail("backend", "must be cpu or cuda, not '" + w.backend + "'");
  if (w.threads < 1) fail("threads", "must be at least 1, not " + std::to_string(w.threads));
  if (!(w.slowdown >= 1 && w.slowdown <= 1000)) fail("slowdown", "must be from 1 to 1000");
  if (!(w.time_dilation >= 1 && w.time_dilation <= 1000)) fail("time_dilation", "must be from 1 to 1000");
  if (w.world < 1) fail("world", "must be at least 1, not " + std::to_string(w.world));
  if (w.rendezvous.empty()) fail("rendezvous", "must name a directory or grpc://HOST:PORT/JOB");
  if (w.host.empty()) fail("host", "must be an IPv4 address");
  if (w.checkpoint_dir && w.checkpoint_every < 1) fail("checkpoint_every", "must be at least 1 with a checkpoint_dir");
  if (!w.checkpoint_dir && (w.checkpoint_every || w.checkpoint_keep)) fail("checkpoint_dir", "is missing: checkpoint_every or checkpoint_keep is set");
  if (w.checkpoint_every < 0) fail("checkpoint_every", "must not be negative");
  if (w.checkpoint_keep < 0) fail("checkpoint_keep", "must not be negative");
  if (w.die_rank.has_value() != w.die_step.has_value()) fail("die_rank", "and die_step come together");
  if (w.die_rank && (*w.die_rank < 0 || *w.die_rank >= w.world)) fail("die_rank", "must be a rank of the job");
  // Paths travel to open(2): an embedded NUL would silently cut them.
  auto path = [&](const char* key, const std::string& p) {
    if (p.find('\0') != std::string::npos) fail(key, "contains a NUL byte");
  };
  path("plan", w.plan), path("rendezvous", w.rendezvous);
  for (auto [key, value] : {std::pair{"model", &w.model}, {"cluster", &w.cluster}, {"data", &w.data}, {"token_file", &w.token_file},
                            {"rendezvous_ca", &w.rendezvous_ca}, {"progress_dir", &w.progress_dir},
                            {"trace_events", &w.trace_events}, {"traffic_events", &w.traffic_events},
                            {"checkpoint_dir", &w.checkpoint_dir}, {"resume", &w.resume}, {"rescue_dir", &w.rescue_dir},
                            {"rescue_from", &w.rescue_from}})
    if (*value) path(key, **value);
  return out;
}

Result<WorkerJob> worker_job_from_json(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) return Diagnostic{file, 0, 0, "", "a worker's job must be a JSON object"};
  Diagnostics errors;
  for (const auto& [key, value] : j.items())
    if (std::find(kFields.begin(), kFields.end(), key) == kFields.end()) errors.push_back({file, 0, 0, key, "is not a field of a worker's job"});
  int version = 0;
  WorkerJob w;
  Reader r(j, file);
  r.integer("version", version, true);
  r.text("plan", w.plan, true);
  r.text("model", w.model), r.text("cluster", w.cluster), r.text("data", w.data);
  r.integer("steps", w.steps, true);
  r.unsigned64("seed", w.seed);
  r.number("lr", w.lr);
  r.text("backend", w.backend, true);
  r.integer("threads", w.threads, true);
  r.number("slowdown", w.slowdown), r.number("time_dilation", w.time_dilation);
  r.flag("emulate_links", w.emulate_links), r.flag("emulate_devices", w.emulate_devices);
  r.integer("world", w.world, true);
  r.text("rendezvous", w.rendezvous, true);
  r.text("host", w.host, true);
  r.text("token_file", w.token_file), r.text("rendezvous_ca", w.rendezvous_ca), r.text("progress_dir", w.progress_dir);
  r.text("trace_events", w.trace_events), r.text("traffic_events", w.traffic_events);
  r.text("checkpoint_dir", w.checkpoint_dir), r.text("resume", w.resume);
  r.text("rescue_dir", w.rescue_dir), r.text("rescue_from", w.rescue_from);
  r.integer("checkpoint_every", w.checkpoint_every, false), r.integer("checkpoint_keep", w.checkpoint_keep, false);
  r.integer("die_rank", w.die_rank), r.integer("die_step", w.die_step);
  for (auto& e : r.take()) errors.push_back(std::move(e));
  if (!errors.empty()) return errors;
  if (version != kVersion)
    return Diagnostic{file, 0, 0, "version", "is " + std::to_string(version) + "; this hetexec reads version " + std::to_string(kVersion)};
  if (auto bad = check(w, file); !bad.empty()) return bad;
  return w;
}

Result<Done> write_worker_job(const std::string& path, const WorkerJob& job) {
  if (auto bad = check(job, path); !bad.empty()) return bad;
  const std::string text = to_json(job).dump(1) + "\n";
  const std::string tmp = path + ".tmp";
  auto fail = [&](const char* what) {
    Diagnostic d{path, 0, 0, "", std::string(what) + ": " + std::strerror(errno)};
    ::unlink(tmp.c_str());
    return d;
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot write the job file");
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return fail("cannot write the job file");
    }
    done += std::size_t(n);
  }
  if (::close(fd) != 0) return fail("cannot write the job file");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot write the job file");
  return Done{};
}

Result<WorkerJob> read_worker_job(const std::string& path) {
  auto text = input::read_file(path, kMaxJobFileBytes);
  if (!text) return text.errors();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past a double (out_of_range)
    return Diagnostic{path, 0, 0, "", std::string("not JSON: ") + e.what()};
  }
  return worker_job_from_json(j, path);
}

}  // namespace het::launch
