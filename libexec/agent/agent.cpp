#include "agent/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include "control/admission.hpp"
#include "control/error_kind.hpp"
#include "hetexec.grpc.pb.h"
#include "input/address.hpp"
#include "launch/cause.hpp"
#include "launch/worker_job.hpp"
#include "launch/workers.hpp"
#include "node/node.hpp"
#include "progress/progress.hpp"
#include "rendezvous/rendezvous.hpp"
#include "runtime/runtime.hpp"
#include "validation/inputs.hpp"

namespace het::agent {

Result<job::Offer> parse_devices(const std::string& spec) {
  const auto colon = spec.find(':');
  auto bad = [&](const std::string& why) { return Diagnostic{"", 0, 0, "devices", why + " (expected cpu:N, cuda:all or cuda:N), got '" + spec + "'"}; };
  if (colon == std::string::npos) return bad("no kind");
  const std::string kind = spec.substr(0, colon), count = spec.substr(colon + 1);
  int n = -1;
  if (count != "all") {
    if (count.empty() || count.size() > 4 || count.find_first_not_of("0123456789") != std::string::npos) return bad("bad count");
    n = std::stoi(count);
    if (n < 1) return bad("count must be at least 1");
  }
  job::Offer offer{kind, {}};
  if (kind == "cpu") {
    if (n < 0) n = std::max(1, int(std::thread::hardware_concurrency()));
    for (int i = 0; i < n; ++i) offer.devices.push_back({"cpu", 0});
    return offer;
  }
  if (kind != "cuda") return bad("unknown kind '" + kind + "'");
  const auto node = node::describe_node();
  if (node.gpus.empty()) return Diagnostic{"", 0, 0, "devices", "cuda: this node has no CUDA GPU this build can use"};
  if (n > int(node.gpus.size()))
    return Diagnostic{"", 0, 0, "devices", "cuda:" + count + ": this node has " + std::to_string(node.gpus.size()) + " CUDA GPUs"};
  for (int i = 0; i < (n < 0 ? int(node.gpus.size()) : n); ++i)
    offer.devices.push_back({node.gpus[std::size_t(i)].name, node.gpus[std::size_t(i)].memory_bytes});
  return offer;
}

namespace {

using Clock = std::chrono::steady_clock;
namespace pb = het::v1;

constexpr std::size_t kMaxEvents = 200000;  // per job; worker lines beyond are dropped (counted)
constexpr std::size_t kMaxDetail = 1024;    // bytes of a job's status detail (its last line of output)

struct Job {
  std::string id;
  std::vector<job::RankOnNode> ranks;
  int world = 0;
  std::string dir, job_file;  // job_file: what every worker is told (launch/worker_job.hpp)
  double lease_s = 0;  // 0: no lease
  Clock::time_point lease_deadline;
  enum class State { prepared, running, finished, failed } state = State::prepared;
  std::string detail;
  // The event log every Events call streams from the start; `closed` once the last one is in.
  std::vector<pb::Event> events;
  std::size_t dropped_lines = 0;
  bool closed = false;
  std::condition_variable changed;
  launch::WorkerGroup workers;
  std::thread thread;
  bool stop_requested = false;
  // The watchdog over this node's ranks (progress/progress.hpp), from Start on.
  double hang_bound_s = progress::kFloorS;
  std::unique_ptr<progress::Watchdog> watchdog;
};

const char* state_name(Job::State s) {
  switch (s) {
    case Job::State::prepared: return "prepared";
    case Job::State::running: return "running";
    case Job::State::finished: return "finished";
    case Job::State::failed: return "failed";
  }
  return "?";
}

// host:port with a port in range and a host of name characters.
bool valid_address(const std::string& a) { return input::parse_host_port(a, "rendezvous_address").ok(); }

// A job's data file as its workers will open it (Options::data_root); errors are sentences
// for the PrepareResponse.
Result<std::string> data_file(const std::string& path, const std::string& root, const std::string& node) {
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& why) { return Diagnostic{"", 0, 0, "settings.data_path", why}; };
  if (path.find('\0') != std::string::npos) return refuse("settings.data_path contains a NUL byte");
  if (path.size() > 4096) return refuse("settings.data_path is longer than 4096 bytes");
  std::error_code ec;
  const fs::path given = root.empty() || fs::path(path).is_absolute() ? fs::path(path) : fs::path(root) / path;
  const fs::path real = fs::canonical(given, ec);
  if (ec || !fs::is_regular_file(real, ec)) return refuse("settings.data_path: no such file on node " + node);
  if (!root.empty()) {
    const fs::path base = fs::canonical(root, ec);
    const auto rel = ec ? fs::path("..") : real.lexically_relative(base);
    if (rel.empty() || *rel.begin() == "..")
      return refuse("settings.data_path: " + path + " is not under node " + node + "'s data root " + root);
  }
  return real.string();
}

// A job's checkpoint path (settings.checkpoint_dir or settings.resume) as its workers will use
// it: under `root` (Options::checkpoint_root), which must be set. Errors are sentences.
Result<std::string> checkpoint_path(const std::string& path, const std::string& root, const std::string& node, const char* field) {
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& why) { return Diagnostic{"", 0, 0, std::string("settings.") + field, why}; };
  const std::string name = std::string("settings.") + field;
  if (root.empty()) return refuse(name + ": node " + node + " takes no checkpoints (its agent has no --checkpoint-root)");
  if (path.find('\0') != std::string::npos) return refuse(name + " contains a NUL byte");
  if (path.size() > 4096) return refuse(name + " is longer than 4096 bytes");
  std::error_code ec;
  const fs::path base = fs::canonical(root, ec);
  if (ec) return refuse(name + ": node " + node + "'s checkpoint root " + root + " is gone");
  const fs::path real = fs::weakly_canonical(fs::path(path).is_absolute() ? fs::path(path) : base / path, ec);
  const auto rel = ec ? fs::path("..") : real.lexically_relative(base);
  if (rel.empty() || *rel.begin() == ".." || rel == ".")
    return refuse(name + ": " + path + " is not inside node " + node + "'s checkpoint root " + root);
  return real.string();
}

}  // namespace

struct Agent::State final : public pb::Agent::Service {
  Options opt;
  control::Admission admission;
  std::shared_ptr<spdlog::logger> log;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Job>> jobs;
  std::vector<std::string> finished_order;  // ids of ended jobs, oldest first
  std::condition_variable stopped_cv;
  bool stopping = false;
  std::thread watchdog;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  int port = 0;
  std::once_flag stop_once;

  explicit State(const Options& o) : opt(o), admission(o.security.token), log(o.log ? o.log : spdlog::default_logger()) {}

  // ---- job bookkeeping (callers hold mu) ---------------------------------------------------
  void post(Job& j, pb::Event e) {
    if (j.closed) return;
    const bool line = e.has_line();
    if (line && j.events.size() >= kMaxEvents) {
      ++j.dropped_lines;
      return;
    }
    const bool last = e.has_finished();
    j.events.push_back(std::move(e));
    if (last) j.closed = true;
    j.changed.notify_all();
  }
  void post_error(Job& j, ErrorKind kind, const std::string& message, std::optional<int> rank = std::nullopt) {
    pb::Event e;
    e.mutable_error()->set_message(message);
    e.mutable_error()->set_kind(control::to_proto(kind));
    if (rank) e.mutable_error()->set_rank(std::uint32_t(*rank));
    post(j, std::move(e));
  }
  void post_finished(Job& j, bool ok) {
    pb::Event e;
    e.mutable_finished()->set_ok(ok);
    post(j, std::move(e));
  }
  // Ends a job that is still going: its workers are asked to stop; a prepared job ends at once.
  // `rank`: the rank whose worker failed, when it is one worker's failure.
  void end_job(Job& j, ErrorKind kind, const std::string& why, std::optional<int> rank = std::nullopt) {
    if (j.state == Job::State::finished || j.state == Job::State::failed || j.stop_requested) return;
    log->warn("job={} event=stop reason=\"{}\"", j.id, why);
    j.detail = why;
    j.stop_requested = true;
    post_error(j, kind, why, rank);
    if (j.state == Job::State::running) {
      j.workers.stop(2.0);
    } else {
      j.state = Job::State::failed;
      post_finished(j, false);
      retire(j.id);
    }
  }
  void retire(const std::string& id) {
    finished_order.push_back(id);
    if (stopping) return;  // stop() joins every job's thread itself
    while (int(finished_order.size()) > opt.max_finished_jobs) {
      auto it = jobs.find(finished_order.front());
      finished_order.erase(finished_order.begin());
      if (it != jobs.end()) drop(it);
    }
  }
  // Drops the record of job `id` if it has ended, so that its id is free again.
  void forget_ended(const std::string& id) {
    auto it = jobs.find(id);
    if (it == jobs.end() || (it->second->state != Job::State::finished && it->second->state != Job::State::failed)) return;
    finished_order.erase(std::remove(finished_order.begin(), finished_order.end(), id), finished_order.end());
    drop(it);
  }
  // Forgets an ended job and removes its directory. Its thread has posted its last event and
  // only returns now (or is this thread).
  void drop(std::map<std::string, std::shared_ptr<Job>>::iterator it) {
    if (it->second->thread.joinable()) {
      if (it->second->thread.get_id() == std::this_thread::get_id()) it->second->thread.detach();
      else it->second->thread.join();
    }
    std::error_code ec;
    std::filesystem::remove_all(it->second->dir, ec);
    jobs.erase(it);
  }
  std::set<int> busy_devices() const {
    std::set<int> busy;
    for (const auto& [id, j] : jobs)
      if (j->state == Job::State::prepared || j->state == Job::State::running)
        for (const auto& r : j->ranks) busy.insert(r.device);
    return busy;
  }

  // ---- the service ---------------------------------------------------------------------------
  grpc::Status Describe(grpc::ServerContext* context, const pb::DescribeRequest* request, pb::DescribeResponse* response) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    response->set_node(opt.node.to_string());
    response->set_agent_version(opt.version);
    response->set_api_version(control::api_version());
    char host_name[256] = {};
    gethostname(host_name, sizeof host_name - 1);
    response->set_hostname(host_name);
    // Identical devices are one entry.
    for (const auto& d : opt.offer.devices) {
      const auto kind = opt.offer.kind == "cuda" ? pb::DEVICE_KIND_CUDA : pb::DEVICE_KIND_CPU;
      auto* last = response->devices_size() ? response->mutable_devices(response->devices_size() - 1) : nullptr;
      if (last && last->kind() == kind && last->name() == d.name && last->memory_bytes() == std::uint64_t(d.memory)) {
        last->set_count(last->count() + 1);
        continue;
      }
      auto* dev = response->add_devices();
      dev->set_kind(kind), dev->set_count(1), dev->set_name(d.name), dev->set_memory_bytes(std::uint64_t(d.memory));
    }
    std::lock_guard lock(mu);
    for (const auto& [id, j] : jobs) {
      auto* s = response->add_jobs();
      s->set_job_id(id);
      const bool stalled = j->state == Job::State::running && !j->stop_requested && j->watchdog &&
                           j->watchdog->still_s() > j->hang_bound_s / 2;
      s->set_state(stalled ? "stalled" : state_name(j->state));
      for (const auto& r : j->ranks) s->add_ranks(std::uint32_t(r.rank));
      s->set_detail(j->detail);
      if (j->lease_s > 0 && (j->state == Job::State::prepared || j->state == Job::State::running))
        s->set_lease_seconds_left(std::uint32_t(std::max(0.0, std::chrono::duration<double>(j->lease_deadline - Clock::now()).count())));
    }
    return grpc::Status::OK;
  }

  grpc::Status Prepare(grpc::ServerContext* context, const pb::PrepareRequest* request, pb::PrepareResponse* response) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    auto refuse = [&](const std::string& why) {
      log->warn("job={} event=refused reason=\"{}\"", request->job_id().substr(0, 128), why);
      response->set_ok(false);
      response->set_error(why);
      return grpc::Status::OK;
    };
    if (!rendezvous::valid_key(request->job_id()))
      return {grpc::StatusCode::INVALID_ARGUMENT, "job ids are 1 to 128 characters of [A-Za-z0-9._-], not starting with '.'"};
    const auto& st = request->settings();
    if (st.steps() < 1 || st.steps() > 10'000'000) return refuse("settings.steps must be in [1, 10000000]");
    if (st.time_dilation() != 0 && !(st.time_dilation() >= 1 && st.time_dilation() <= 1000))
      return refuse("settings.time_dilation must be in [1, 1000] (or 0 for none)");
    if (!std::isfinite(st.learning_rate()) || st.learning_rate() <= 0 || st.learning_rate() > 10)
      return refuse("settings.learning_rate must be in (0, 10]");
    if (st.threads() > 1024) return refuse("settings.threads must be at most 1024");
    if (!(st.hang_timeout_s() >= 0 && st.hang_timeout_s() <= 86400)) return refuse("settings.hang_timeout_s must be in [0, 86400]");
    std::string data;  // the token file, as the workers will open it
    if (!st.data_path().empty()) {
      auto checked = data_file(st.data_path(), opt.data_root, opt.node.to_string());
      if (!checked) return refuse(checked.errors().front().message);
      data = *checked;
    }
    std::string checkpoint_dir, resume;  // as the workers will use them
    if (!st.checkpoint_dir().empty()) {
      auto checked = checkpoint_path(st.checkpoint_dir(), opt.checkpoint_root, opt.node.to_string(), "checkpoint_dir");
      if (!checked) return refuse(checked.errors().front().message);
      checkpoint_dir = *checked;
      if (st.checkpoint_every() < 1 || st.checkpoint_every() > 10'000'000)
        return refuse("settings.checkpoint_every must be in [1, 10000000] with a checkpoint_dir");
    } else if (st.checkpoint_every() || st.checkpoint_keep()) {
      return refuse("settings.checkpoint_every and checkpoint_keep need a checkpoint_dir");
    }
    if (st.checkpoint_keep() > 1'000'000) return refuse("settings.checkpoint_keep must be at most 1000000");
    if (!st.resume().empty()) {
      auto checked = checkpoint_path(st.resume(), opt.checkpoint_root, opt.node.to_string(), "resume");
      if (!checked) return refuse(checked.errors().front().message);
      resume = *checked;
    }
    std::string rescue_from;  // a failed job's survivors' state (submit --elastic)
    if (!st.rescue_from().empty()) {
      auto checked = checkpoint_path(st.rescue_from(), opt.checkpoint_root, opt.node.to_string(), "rescue_from");
      if (!checked) return refuse(checked.errors().front().message);
      rescue_from = *checked;
    }
    job::NodeId node = opt.node;  // the plan's name for this node (after a re-plan, another)
    if (!request->plan_node().empty()) {
      auto named = job::parse_node_id(request->plan_node());
      if (!named) return refuse("plan_node: " + named.errors().front().message);
      node = *named;
    }
    const std::string as = node == opt.node ? "" : " (run as node " + node.to_string() + " of the plan)";
    if (!valid_address(request->rendezvous_address())) return refuse("rendezvous_address must be HOST:PORT");
    if (request->lease_seconds() > 86400) return refuse("lease_seconds must be at most 86400");
    if (request->rendezvous_ca_pem().size() > (1 << 20)) return refuse("rendezvous_ca_pem must be at most 1 MiB");
    {
      std::lock_guard lock(mu);
      if (stopping) return {grpc::StatusCode::UNAVAILABLE, "the agent is stopping"};
      forget_ended(request->job_id());  // an aborted or finished job's id is free again (Abort "forgets the job")
      if (jobs.count(request->job_id())) return refuse("job " + request->job_id() + " exists already on this node");
    }
    // The plan: written to the job's directory, read and validated like any plan file.
    const std::string dir = opt.workdir + "/" + request->job_id();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return refuse("cannot create " + dir + ": " + ec.message());
    const std::string plan_file = dir + "/plan.json";
    std::ofstream(plan_file) << request->plan_json();
    auto cleanup = [&] { std::filesystem::remove_all(dir, ec); };
    InputFiles files;
    files.plan = plan_file;
    auto loaded = load_plan_inputs(files);
    if (!loaded) {
      cleanup();
      std::string why = "the plan is not valid:";
      for (std::size_t i = 0; i < loaded.errors().size() && i < 5; ++i) why += " " + loaded.errors()[i].to_string() + ";";
      return refuse(why);
    }
    if (auto why = runtime::unsupported(loaded->plan); !why.empty()) return cleanup(), refuse(why);
    auto mine = job::ranks_on(loaded->plan, node);
    std::vector<int> want, given;
    for (const auto& r : mine) want.push_back(r.rank);
    job::Offer offer = opt.offer;  // as the plan sees this node: its devices in the plan's order
    if (request->device_map_size() > 0) {  // the plan's device i of this node is this agent's device_map[i]
      std::set<std::uint32_t> distinct(request->device_map().begin(), request->device_map().end());
      if (distinct.size() != std::size_t(request->device_map_size()))
        return cleanup(), refuse("device_map names a device twice");
      offer.devices.clear();
      for (auto d : request->device_map()) {
        if (d >= opt.offer.devices.size())
          return cleanup(), refuse("device_map names device " + std::to_string(d) + ", the agent has " + std::to_string(opt.offer.devices.size()));
        offer.devices.push_back(opt.offer.devices[d]);
      }
      for (auto& r : mine) {
        if (r.device >= request->device_map_size())
          return cleanup(), refuse("the plan uses device " + std::to_string(r.device) + " of node " + node.to_string() + ", device_map has " +
                                   std::to_string(request->device_map_size()));
        r.device = int(request->device_map(r.device));
      }
    }
    for (auto r : request->ranks()) given.push_back(int(r));
    if (want != given) {
      auto list = [](const std::vector<int>& v) {
        std::string s;
        for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
        return "[" + s + "]";
      };
      return cleanup(), refuse("the plan runs ranks " + list(want) + " on node " + node.to_string() + ", the request gave " + list(given));
    }
    if (auto problems = job::check_offer(loaded->plan, node, offer); !problems.empty()) return cleanup(), refuse(problems.front() + as);
    auto j = std::make_shared<Job>();
    j->id = request->job_id();
    j->ranks = std::move(mine);
    j->world = program::Topology(loaded->plan).ranks();
    j->dir = dir;
    launch::WorkerJob w;
    w.plan = plan_file;
    if (!data.empty()) w.data = data;
    w.steps = int(st.steps()), w.seed = st.seed(), w.lr = st.learning_rate();
    // A GPU node runs its ranks on the CUDA backend, each on the plan's device of the node
    // (the offer's device i is CUDA device i: cuda:N offers the first N).
    w.backend = opt.offer.kind == "cuda" ? "cuda" : "cpu";
    w.threads = st.threads() > 0 ? int(st.threads())
                                 : std::max(1, int(std::thread::hardware_concurrency()) / std::max<int>(1, int(j->ranks.size())));
    w.slowdown = opt.emulate_slowdown, w.time_dilation = std::max(1.0, st.time_dilation());
    w.emulate_links = st.emulate_links(), w.emulate_devices = st.emulate_devices();
    if (!checkpoint_dir.empty()) {
      w.checkpoint_dir = checkpoint_dir;
      w.checkpoint_every = int(st.checkpoint_every()), w.checkpoint_keep = int(st.checkpoint_keep());
      if (st.elastic()) w.rescue_dir = checkpoint_dir + "/.rescue/" + request->job_id();  // submit/elastic.hpp
    }
    if (!rescue_from.empty()) w.rescue_from = rescue_from;
    if (!resume.empty()) w.resume = resume;
    w.world = j->world;
    w.rendezvous = "grpc://" + request->rendezvous_address() + "/" + request->job_id();
    w.host = opt.advertise;
    if (!opt.worker_token_file.empty()) w.token_file = opt.worker_token_file;
    if (!request->rendezvous_ca_pem().empty()) {
      w.rendezvous_ca = dir + "/rendezvous-ca.pem";
      std::ofstream(*w.rendezvous_ca) << request->rendezvous_ca_pem();
    }
    w.progress_dir = dir;
    j->job_file = dir + "/job.json";
    if (auto written = launch::write_worker_job(j->job_file, w); !written) return cleanup(), refuse(written.errors().front().to_string());
    j->hang_bound_s = st.hang_timeout_s() > 0 ? st.hang_timeout_s()
                                              : progress::default_bound_s(loaded->plan, std::max(1.0, opt.emulate_slowdown) *
                                                                                            std::max(1.0, st.time_dilation()),
                                                                          st.emulate_devices());
    j->lease_s = request->lease_seconds();
    j->lease_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(j->lease_s));
    std::lock_guard lock(mu);
    if (jobs.count(j->id)) return refuse("job " + j->id + " exists already on this node");  // a concurrent twin
    const auto busy = busy_devices();
    for (const auto& r : j->ranks)
      if (busy.count(r.device)) return cleanup(), refuse("device " + std::to_string(r.device) + " of node " + opt.node.to_string() + " is busy with another job");
    jobs[j->id] = j;
    log->info("job={} event=prepared ranks={} world={} lease_s={}", j->id, j->ranks.size(), j->world, j->lease_s);
    response->set_ok(true);
    return grpc::Status::OK;
  }

  std::vector<launch::WorkerCommand> commands(const Job& j) const {
    std::vector<launch::WorkerCommand> out;
    for (const auto& r : j.ranks) {
      std::vector<std::string> argv = {opt.worker_executable, "worker", "--job", j.job_file, "--rank", std::to_string(r.rank),
                                       "--holder", opt.node.to_string() + ":" + std::to_string(r.device)};
      if (opt.offer.kind == "cuda") argv.insert(argv.end(), {"--device", std::to_string(r.device)});
      out.push_back({r.rank, std::move(argv)});
    }
    return out;
  }

  // The job's supervisor thread: runs its workers until all have ended.
  void supervise(std::shared_ptr<Job> j) {
    std::map<int, std::string> last_err;  // last stderr line per rank that says something (a blank line after a message does not)
    bool failed = false;
    auto result = j->workers.run(commands(*j), [&](const launch::WorkerEvent& e) {
      std::lock_guard lock(mu);
      if (e.kind == launch::WorkerEvent::Kind::started) {
        j->watchdog->spawned(e.rank, e.pid);
        return;
      }
      pb::Event out;
      if (e.kind == launch::WorkerEvent::Kind::line) {
        if (e.from_stderr) {
          if (e.text.find_first_not_of(" \t\r") != std::string::npos) last_err[e.rank] = e.text;
          log->info("job={} rank={} stderr=\"{}\"", j->id, e.rank, e.text);
        }
        if (!e.from_stderr && !e.text.empty()) j->detail = launch::valid_utf8(std::string_view(e.text).substr(0, kMaxDetail));
        auto* l = out.mutable_line();
        l->set_rank(std::uint32_t(e.rank)), l->set_from_stderr(e.from_stderr), l->set_text(e.text);
        post(*j, std::move(out));
        return;
      }
      auto* x = out.mutable_exited();
      x->set_rank(std::uint32_t(e.rank)), x->set_exit_code(e.exit_code), x->set_signal_number(e.signal);
      post(*j, std::move(out));
      log->info("job={} event=worker_exited rank={} exit_code={} signal={}", j->id, e.rank, e.exit_code, e.signal);
      const bool ok = e.signal == 0 && e.exit_code == 0;
      if (!ok && !e.stopped) {
        const std::string how = e.signal ? "was killed by signal " + std::to_string(e.signal) : "exited with status " + std::to_string(e.exit_code);
        const auto err = last_err.find(e.rank);
        const std::string why = "rank " + std::to_string(e.rank) + " " + how + (err != last_err.end() ? ": " + err->second : "");
        if (!j->stop_requested) {
          failed = true;
          end_job(*j, launch::kind_of_exit(e.exit_code, e.signal), why, e.rank);
        } else {
          // It failed on its own while the job was already stopping for another rank's failure
          // (a killed rank reaped after the peer that lost it): reported too, so that the
          // submitter picks the root cause among them by kind (launch/cause.hpp).
          post_error(*j, launch::kind_of_exit(e.exit_code, e.signal), why, e.rank);
        }
      }
    });
    std::lock_guard lock(mu);
    if (!result) end_job(*j, ErrorKind::internal, to_string(result.errors()));
    const bool ok = result && !failed && !j->stop_requested;
    j->state = ok ? Job::State::finished : Job::State::failed;
    if (j->dropped_lines) post_error(*j, ErrorKind::internal, std::to_string(j->dropped_lines) + " lines of worker output were dropped");
    post_finished(*j, ok);
    log->info("job={} event=finished ok={}", j->id, ok);
    retire(j->id);
  }

  grpc::Status Start(grpc::ServerContext* context, const pb::StartRequest* request, pb::StartResponse*) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    std::lock_guard lock(mu);
    auto it = jobs.find(request->job_id());
    if (it == jobs.end()) return {grpc::StatusCode::NOT_FOUND, "no job '" + request->job_id().substr(0, 128) + "' on this node"};
    auto j = it->second;
    if (j->state != Job::State::prepared || j->stop_requested)
      return {grpc::StatusCode::FAILED_PRECONDITION, "job " + j->id + " is " + state_name(j->state) + ", not prepared"};
    j->state = Job::State::running;
    std::vector<int> ranks;
    for (const auto& r : j->ranks) ranks.push_back(r.rank);
    j->watchdog = std::make_unique<progress::Watchdog>(j->dir, ranks, j->hang_bound_s, int(ranks.size()) == j->world);
    j->thread = std::thread([this, j] { supervise(j); });
    log->info("job={} event=started workers={}", j->id, j->ranks.size());
    return grpc::Status::OK;
  }

  grpc::Status Abort(grpc::ServerContext* context, const pb::AbortRequest* request, pb::AbortResponse*) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    std::lock_guard lock(mu);
    auto it = jobs.find(request->job_id());
    if (it == jobs.end()) return {grpc::StatusCode::NOT_FOUND, "no job '" + request->job_id().substr(0, 128) + "' on this node"};
    end_job(*it->second, ErrorKind::aborted, "aborted: " + (request->reason().empty() ? std::string("by request") : request->reason().substr(0, 1024)));
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const pb::HeartbeatRequest* request, pb::HeartbeatResponse* response) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    std::lock_guard lock(mu);
    auto it = jobs.find(request->job_id());
    if (it == jobs.end()) return {grpc::StatusCode::NOT_FOUND, "no job '" + request->job_id().substr(0, 128) + "' on this node"};
    Job& j = *it->second;
    if (j.state == Job::State::finished || j.state == Job::State::failed || j.stop_requested)
      return {grpc::StatusCode::FAILED_PRECONDITION, "job " + j.id + " has ended (" + j.detail + ")"};
    j.lease_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(j.lease_s));
    response->set_lease_seconds(std::uint32_t(j.lease_s));
    return grpc::Status::OK;
  }

  grpc::Status Events(grpc::ServerContext* context, const pb::EventsRequest* request, grpc::ServerWriter<pb::Event>* writer) override {
    if (auto refused = admission.admit(*context, request->api_version()); !refused.ok()) return refused;
    std::shared_ptr<Job> j;
    {
      std::lock_guard lock(mu);
      auto it = jobs.find(request->job_id());
      if (it == jobs.end()) return {grpc::StatusCode::NOT_FOUND, "no job '" + request->job_id().substr(0, 128) + "' on this node"};
      j = it->second;
    }
    std::size_t next = 0;
    for (;;) {
      std::vector<pb::Event> batch;
      bool done = false;
      {
        std::unique_lock lock(mu);
        // A closed log has nothing more to wait for: the stream ends as soon as its last event is sent.
        j->changed.wait_for(lock, std::chrono::milliseconds(200), [&] { return j->events.size() > next || j->closed || stopping; });
        batch.assign(j->events.begin() + std::ptrdiff_t(next), j->events.end());
        next = j->events.size();
        done = j->closed || stopping;
      }
      for (const auto& e : batch)
        if (!writer->Write(e)) return {grpc::StatusCode::CANCELLED, "the client went away"};
      if (done && batch.empty()) return grpc::Status::OK;
      if (context->IsCancelled()) return {grpc::StatusCode::CANCELLED, "the client went away"};
    }
  }

  // Ends jobs whose lease ran out, and jobs with a hung rank: at once when the rank to blame
  // runs here; when this node's ranks wait for one on another node, after half the bound
  // more, so that the node that runs it names it first (and submit's heartbeats find a node
  // that stopped answering).
  void watch_leases() {
    std::unique_lock lock(mu);
    while (!stopping) {
      stopped_cv.wait_for(lock, std::chrono::milliseconds(200));
      const auto now = Clock::now();
      for (auto& [id, j] : jobs) {
        if (j->lease_s > 0 && now > j->lease_deadline && (j->state == Job::State::prepared || j->state == Job::State::running))
          end_job(*j, ErrorKind::aborted, "the submitter's lease expired: no heartbeat for " + std::to_string(int(j->lease_s)) + " s");
        if (j->state != Job::State::running || j->stop_requested || !j->watchdog) continue;
        if (auto stall = j->watchdog->check()) {
          if (!stall->remote || j->watchdog->still_s() >= 1.5 * j->hang_bound_s)
            end_job(*j, ErrorKind::hung, stall->why, stall->remote ? std::nullopt : std::optional<int>(stall->rank));
        }
      }
    }
  }
};

Result<std::unique_ptr<Agent>> Agent::start(const Options& options) {
  if (!options.security.token.empty() && !control::valid_token(options.security.token))
    return Diagnostic{"", 0, 0, "token", "the agent's token must be one word of printable ASCII characters"};
  if (options.offer.devices.empty()) return Diagnostic{"", 0, 0, "devices", "the agent offers no devices"};
  if (!(options.emulate_slowdown >= 1)) return Diagnostic{"", 0, 0, "emulate-slowdown", "must be at least 1"};
  std::error_code ec;
  std::filesystem::create_directories(options.workdir, ec);
  if (ec) return Diagnostic{"", 0, 0, "workdir", "cannot create " + options.workdir + ": " + ec.message()};
  auto credentials = control::server_credentials(options.security);
  if (!credentials) return credentials.errors();
  auto listen = input::parse_host_port(options.listen, "listen", input::AnyPort::allowed);
  if (!listen) return listen.errors();
  auto state = std::make_unique<State>(options);
  state->host = listen->host;
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // the port is this agent's alone
  builder.AddListeningPort(options.listen, *credentials, &state->port);
  builder.RegisterService(state.get());
  builder.SetMaxReceiveMessageSize(16 << 20);  // a plan with its model and cluster; more is refused unread
  state->server = builder.BuildAndStart();
  if (!state->server || state->port == 0)
    return Diagnostic{"", 0, 0, "listen", "cannot listen on '" + options.listen + "' (address in use or not this machine's?)"};
  State* s = state.get();
  state->watchdog = std::thread([s] { s->watch_leases(); });
  state->log->info("event=listening address={}:{} node={} devices={}x{} token={} tls={}", state->host, state->port,
                   options.node.to_string(), options.offer.devices.size(), options.offer.kind,
                   options.security.token.empty() ? "no" : "yes", options.security.tls ? "yes" : "no");
  return std::unique_ptr<Agent>(new Agent(std::move(state)));
}

Agent::Agent(std::unique_ptr<State> state) : state_(std::move(state)) {}
Agent::~Agent() { stop(); }
int Agent::port() const { return state_->port; }
std::string Agent::address() const { return state_->host + ":" + std::to_string(state_->port); }

void Agent::wait() {
  std::unique_lock lock(state_->mu);
  state_->stopped_cv.wait(lock, [&] { return state_->stopping; });
}

void Agent::stop() {
  std::call_once(state_->stop_once, [this] {
    State& s = *state_;
    std::vector<std::shared_ptr<Job>> all;
    {
      std::lock_guard lock(s.mu);
      s.stopping = true;
      for (auto& [id, j] : s.jobs) all.push_back(j);
      for (auto& j : all) s.end_job(*j, ErrorKind::killed, "the agent is stopping");  // this node goes away: a cause, not a consequence
      s.stopped_cv.notify_all();
      for (auto& j : all) j->changed.notify_all();
    }
    if (s.watchdog.joinable()) s.watchdog.join();
    for (auto& j : all)
      if (j->thread.joinable()) j->thread.join();
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    s.server->Wait();
    s.log->info("event=stopped");
  });
}

}  // namespace het::agent
