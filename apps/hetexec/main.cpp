// hetexec: the executor's command line. Argument parsing and output formatting only; the
// work is done in libexec. Exit status: 0 success, 2 usage error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <iostream>

#include "het/version.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/data.hpp"
#include "input/input.hpp"
#include "collective/collective.hpp"
#include "job/placement.hpp"
#include "launch/cause.hpp"
#include "launch/local.hpp"
#include "launch/workers.hpp"
#include "options.hpp"
#include "program/shards.hpp"
#include "progress/progress.hpp"
#include "spec/catalog.hpp"
#include "runtime/checkpoints.hpp"
#include "runtime/pace.hpp"
#include "runtime/runtime.hpp"
#include "control/credentials.hpp"
#include "rendezvous/open.hpp"
#include "transport/ibverbs.hpp"
#include "transport/tcp.hpp"
#include "validation/inputs.hpp"
#include <nlohmann/json.hpp>
#include <optional>
#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <thread>
#include "checkpoint_commands.hpp"
#include "control_commands.hpp"
#include "machine_commands.hpp"
#include "progress.hpp"
#include "memory_prediction.hpp"
#include "node/node.hpp"

namespace {

std::string list_or_none(const std::vector<std::string>& items, const char* none) {
  if (items.empty()) return none;
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string version_text() {
  auto b = het::node::build_info(het::kVersion);
  std::string out = "hetexec " + b.version + "\n";
  out += "  cuda:       " + (b.cuda ? "yes (runtime " + b.cuda_runtime + ", driver " +
                                        (b.cuda_driver.empty() ? std::string("none found") : b.cuda_driver) + ")"
                                  : std::string("no (built without CUDA)")) + "\n";
  out += "  nccl:       " + (b.nccl ? "yes (" + b.nccl_version + ")" : std::string("no")) + "\n";
  out += std::string("  ibverbs:    ") + (b.ibverbs ? "yes (libibverbs)" : "no") + "\n";
  out += "  backends:   " + list_or_none(b.backends, "none") + "\n";
  out += "  transports: " + list_or_none(b.transports, "none") + (b.nccl ? " (NCCL for the sync and TP groups of ranks with a GPU each; ibverbs discovered, not yet sent over)" : "");
  return out;
}

int run_prepare_data(const std::string& text_file, const std::string& output) {
  auto text = het::input::read_file(text_file, het::data::kMaxTextBytes);
  if (!text) {
    std::cerr << "error: " << text.errors().front().to_string() << "\n";
    return 2;
  }
  const auto tokens = het::data::byte_tokens(*text);
  if (tokens.size() < 2) {
    std::cerr << "error: " << text_file << ": needs at least two bytes of text\n";
    return 2;
  }
  if (auto err = het::data::write_tokens(output, tokens); !err.empty()) {
    std::cerr << "error: " << err << "\n";
    return 2;
  }
  std::cout << "wrote " << output << ": " << tokens.size() << " byte-level tokens (vocabulary 256, llm.c format)\n";
  return 0;
}

// `run-local --stats`: the device counters of every rank that has them (runtime::traffic_report), per step.
void print_device_stats(const nlohmann::json& ranks) {
  bool any = false;
  for (const auto& r : ranks) any = any || r.contains("device");
  if (!any) {
    std::cout << "device counters: none (the ranks compute on the CPU)\n";
    return;
  }
  std::cout << "device counters per step (bytes; synchronisations with the device: all, inside forward/backward, of those not for a transfer):\n"
            << " rank   to device     to host   syncs  in F/B  other   sent device to device\n";
  for (const auto& r : ranks) {
    if (!r.contains("device")) continue;
    const auto& d = r["device"];
    const double steps = std::max(1, d["steps"].get<int>());
    auto per = [&](const nlohmann::json& v) { return v.get<double>() / steps; };
    char line[160];
    std::snprintf(line, sizeof line, "%5d %11.0f %11.0f %7.1f %7.1f %6.1f %23.0f\n", r["rank"].get<int>(), per(d["to_device_bytes"]),
                  per(d["to_host_bytes"]), per(d["syncs"]), per(d["compute_syncs"]), per(d["compute_syncs_other"]),
                  per(d["activations"]["sent"]) + per(d["gradients"]["sent"]));
    std::cout << line;
  }
}

// What `run-local` is told.
struct JobArgs {
  het::InputFiles files;  // plan (+ model, cluster)
  int steps = 10;
  std::uint64_t seed = 1;
  double lr = 1e-3;
  std::optional<std::string> data, metrics_out, trace, traffic;
  bool emulate_links = false, emulate_devices = false, stats = false;
  std::string backend = "cpu";
  int threads = 0;  // per rank; 0: the cores shared out among the ranks
  double time_dilation = 1;  // runtime::Options::time_dilation
  int gpus = 0;     // spread the ranks over this many GPUs; 0: every GPU found
  std::optional<double> hang_timeout;  // the watchdog's bound; 0: none; unset: the default
  std::optional<std::string> checkpoint_dir, resume;  // launch::WorkerJob's
  int checkpoint_every = 0, checkpoint_keep = 0;
  std::optional<int> die_rank, die_step;  // a test's fault (WorkerJob::die_rank)
};

// The plan and the data every rank uses.
struct Job {
  het::Plan plan;
  het::data::Batches batches;
};

het::Result<Job> load_job(const het::InputFiles& files, const std::optional<std::string>& data, std::uint64_t seed) {
  auto loaded = het::load_plan_inputs(files);
  if (!loaded) return loaded.errors();
  if (auto why = het::runtime::unsupported(loaded->plan); !why.empty())
    return het::Diagnostic{*files.plan, 0, 0, "", why, het::ErrorKind::unsupported};
  // Plans not completed by `hetplan simulate` or `search`: the same warm-ups and resharding
  // strategies the simulator would derive.
  loaded->plan = het::runtime::with_derived_fields(loaded->plan);
  const auto& m = loaded->plan.model;
  if (data) {
    auto tokens = het::data::read_tokens(*data);
    if (!tokens) return tokens.errors();
    het::data::Batches b(std::move(*tokens), m.seq_length);
    if (b.max_token() >= m.vocab_size)
      return het::Diagnostic{*data, 0, 0, "", "token " + std::to_string(b.max_token()) + " is outside the model's vocabulary of " +
                                                   std::to_string(m.vocab_size)};
    return Job{loaded->plan, std::move(b)};
  }
  return Job{loaded->plan, het::data::Batches::synthetic(m.vocab_size, m.seq_length, seed)};
}

// One rank of a job: `hetexec worker --job FILE --rank R [--device D] [--holder SUB/NODE:DEVICE]`.
int run_worker(const het::launch::WorkerJob& a, int rank, int device, const std::string& holder) {
  // A worker does not outlive the process that started it (run-local, or a node agent):
  // SIGKILL, which also ends a stopped worker (SIGTERM would wait for a SIGCONT).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1;
  // An error ends the worker with the exit status of its kind, which its launcher reads back
  // to tell a cause from its consequences (launch/cause.hpp).
  auto fail = [](const het::Diagnostics& errors) {
    for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
    return het::launch::exit_status_of(errors.front().kind);
  };
  het::InputFiles files;
  files.plan = a.plan, files.model = a.model, files.cluster = a.cluster;
  auto job = load_job(files, a.data, a.seed);
  if (!job) {
    return fail(job.errors());
  }
  auto backend = het::backend::open(a.backend, a.threads, device);
  if (!backend) {
    return fail(backend.errors());
  }
  std::unique_ptr<het::progress::Reporter> progress;
  if (a.progress_dir) {
    auto opened = het::progress::Reporter::open(*a.progress_dir, rank);
    if (!opened) {
      return fail(opened.errors());
    }
    progress = std::move(*opened);
  }
  het::control::ClientSecurity security;
  if (a.token_file) {
    auto token = het::control::read_token_file(*a.token_file);
    if (!token) {
      return fail(token.errors());
    }
    security.token = *token;
  }
  if (a.rendezvous_ca) security.tls = het::control::ClientTls{*a.rendezvous_ca, "", "", ""};
  auto rendezvous = het::rendezvous::open_rendezvous(a.rendezvous, security);
  if (!rendezvous) {
    return fail(rendezvous.errors());
  }
  auto peers = het::transport::Peers::connect(rank, a.world, **rendezvous, 120, a.host);
  if (!peers) {
    return fail(peers.errors());
  }
  // Every rank's seat (host, device, subcluster) decides which groups run on NCCL.
  const auto& subcluster = het::program::Topology(job->plan).stage_of(rank).subcluster;
  const int ordinal = (*backend)->name() == "cuda" ? std::max(0, device) : -1;  // -1: the CPU
  auto seats = het::collective::exchange_seats(**rendezvous, rank, a.world, het::collective::seat_here(ordinal, subcluster), 120);
  if (!seats) {
    return fail(seats.errors());
  }
  het::collective::Fabric fabric(**peers, std::move(*seats), **rendezvous, ordinal, 120);
  std::optional<het::checkpoint::Checkpoint> resume;
  if (a.resume) {
    auto opened = het::checkpoint::Checkpoint::open(*a.resume);
    if (!opened) return fail(opened.errors());
    resume = std::move(*opened);
  }
  // An elastic job's recovery: the failed job's survivors' state when it is whole and newer
  // than the checkpoint (every rank decides alike: they see the same files).
  std::optional<het::checkpoint::Checkpoint> rescued;
  if (a.rescue_from && !holder.empty()) {
    const auto& m = job->plan.model;
    std::map<std::string, std::vector<std::int64_t>> tensors;  // the whole model's
    for (const auto& p : het::program::stage_pieces(m, 0, m.num_layers + 1, 0, 1)) tensors[p.name] = p.slice.shape;
    rescued = het::checkpoint::Checkpoint::open_rescue(*a.rescue_from, tensors,
                                                       [&](const std::string& from) { return int(het::runtime::route_between(from, holder)); });
  }
  het::runtime::Options opt;
  std::array<double, 4> switched{};
  const het::checkpoint::Checkpoint* taken = nullptr;  // what run_rank loaded: resume, rescued or nothing
  opt.rescue = {a.rescue_dir.value_or(""), holder, rescued ? &*rescued : nullptr, &taken};
  opt.switched = &switched;
  opt.resume = resume ? &*resume : nullptr;
  if (a.checkpoint_dir) {
    opt.checkpointing.dir = *a.checkpoint_dir;
    opt.checkpointing.every = a.checkpoint_every, opt.checkpointing.keep = a.checkpoint_keep;
    opt.checkpointing.about = {{"seed", a.seed}, {"lr", a.lr}, {"data", a.data ? *a.data : "synthetic"},
                               {"resumed_from", resume ? resume->dir() : ""}};
    if (a.die_rank == rank) opt.checkpointing.die_while_saving = a.die_step;
  }
  opt.fabric = &fabric;
  opt.steps = a.steps;
  opt.seed = a.seed;
  opt.optimizer.lr = a.lr;
  opt.emulate_links = a.emulate_links;
  opt.emulate_devices = a.emulate_devices;
  opt.slowdown = a.slowdown;
  opt.time_dilation = a.time_dilation;
  opt.progress = progress.get();
  std::vector<het::runtime::MemoryPeak> memory;
  opt.memory = &memory;
  het::runtime::Options::DeviceReport device_report;
  opt.device = &device_report;
  opt.compute_on_this_thread = a.backend == "cpu" && a.threads == 1;
  std::vector<het::sim::TraceEvent> events;
  const auto per_rank = [&](const std::optional<std::string>& prefix) {
    return prefix ? std::optional<std::string>(*prefix + "." + std::to_string(rank)) : std::nullopt;
  };
  const auto trace_file = per_rank(a.trace_events), traffic_file = per_rank(a.traffic_events);
  if (trace_file) opt.trace = &events;
  const double tokens = double(job->plan.model.training.global_batch_size) * job->plan.model.seq_length;
  // How ranks reach each other: TCP today; whether this node could use RDMA, in one sentence.
  std::string links;
  if (rank == 0) {
    const auto choice = het::transport::ibverbs::choose(het::transport::ibverbs::discover());
    links = choice.rdma ? "TCP (RDMA device " + choice.device + " port " + std::to_string(choice.port) +
                              " is usable, but the runtime does not send over RDMA yet)"
                        : "TCP (" + choice.reason + ")";
  }
  // A device backend reports what its Stage cannot do (a CUDA error, tp > 1 on cuda) by throwing.
  het::Result<std::vector<het::runtime::StepReport>> reports = het::Diagnostic{"", 0, 0, "backend", "not run"};
  try {
    reports = het::runtime::run_rank(job->plan, **peers, **backend, job->batches, opt, [&](const het::runtime::StepReport& r) {
      if (rank != 0) return;
      if (r.step == (taken ? taken->step() : 0)) {
        if (taken) std::cout << "resumed from " << taken->dir() << " at step " << taken->step() << std::endl;
        if (taken && rescued && taken == &*rescued)  // from the survivors' state: the bytes each route moved
          std::cout << nlohmann::json{{"switched", {{"in_place", switched[0]}, {"intra_node", switched[1]}, {"inter_node", switched[2]},
                                                    {"inter_subcluster", switched[3]}}}}.dump()
                    << std::endl;
        std::cout << nlohmann::json{{"backend", (*backend)->describe()}, {"links", links}, {"collectives", fabric.summary()},
                                    {"lr", a.lr}, {"optimizer_state", r.optimizer_state}}.dump()
                  << std::endl;
      }
      std::cout << nlohmann::json{{"step", r.step}, {"loss", r.loss}, {"step_s", r.seconds}, {"tokens_per_s", tokens / r.seconds}}.dump()
                << std::endl;
      if (!r.checkpoint.empty())
        std::cout << nlohmann::json{{"checkpoint", r.checkpoint}, {"next_step", r.step + 1}, {"bytes", r.checkpoint_bytes},
                                    {"seconds", r.checkpoint_s}}.dump()
                  << std::endl;
    });
  } catch (const std::exception& e) {
    return fail({het::failure(het::ErrorKind::internal, (*backend)->name() + " backend: " + e.what())});
  }
  if (!reports) return fail(reports.errors());
  if (rank == 0) {  // every rank's peak memory, for run-local / submit to print beside the prediction
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& m : memory) ranks.push_back(het::runtime::to_json(m));
    std::cout << nlohmann::json{{"memory", ranks}}.dump() << std::endl;
  }
  if (traffic_file) std::ofstream(*traffic_file) << het::runtime::traffic_report(job->plan, **peers, a.steps, device_report.steps ? &device_report : nullptr).dump();
  if (trace_file) {  // this rank's events, for run-local to merge
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : events) j.push_back({e.track, e.name, e.start_s, e.duration_s, e.compute_s});
    std::ofstream(*trace_file) << j.dump();
  }
  return 0;
}

int run_local(const JobArgs& a) {
  auto job = load_job(a.files, a.data, a.seed);
  if (!job) {
    for (const auto& e : job.errors()) std::cerr << "error: " << e.to_string() << "\n";
    return 2;
  }
  if (auto backend = het::backend::open(a.backend, 1); !backend) {  // before any worker starts
    for (const auto& e : backend.errors()) std::cerr << "error: " << e.to_string() << "\n";
    return 2;
  }
  if (a.checkpoint_dir.has_value() != (a.checkpoint_every > 0)) {
    std::cerr << "error: " << (a.checkpoint_dir ? "--checkpoint-dir needs --checkpoint-every N" : "--checkpoint-every and --keep need --checkpoint-dir")
              << "\n";
    return 2;
  }
  if (a.checkpoint_keep > 0 && !a.checkpoint_dir) {
    std::cerr << "error: --keep needs --checkpoint-dir\n";
    return 2;
  }
  int first_step = 0;
  if (a.resume) {  // the checkpoint checked before any worker starts
    auto from = het::checkpoint::Checkpoint::open(*a.resume);
    if (!from) {
      for (const auto& e : from.errors()) std::cerr << "error: " << e.to_string() << "\n";
      return 2;
    }
    if (auto why = het::runtime::resume_problem(*from, job->plan.model); !why.empty()) {
      std::cerr << "error: --resume " << *a.resume << ": " << why << "\n";
      return 2;
    }
    if (from->step() >= a.steps) {
      std::cerr << "error: --resume " << *a.resume << ": the checkpoint " << from->dir() << " is at step " << from->step() << "; --steps "
                << a.steps << " counts from the start of training, so nothing is left to run\n";
      return 2;
    }
    first_step = from->step();
  }
  het::launch::LocalJob lj;
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  lj.executable = n > 0 ? std::string(self, std::size_t(n)) : "hetexec";
  lj.world = het::program::Topology(job->plan).ranks();
  // The watchdog's bound: five predicted steps as this run executes them (dilated, on emulated
  // devices), at least 10 s, unless --hang-timeout says otherwise.
  lj.hang_bound_s = a.hang_timeout ? *a.hang_timeout : het::progress::default_bound_s(job->plan, a.time_dilation, a.emulate_devices);
  if (a.gpus > 0 && a.backend != "cuda") {
    std::cerr << "error: --gpus applies to the cuda backend, not to " << a.backend << "\n";
    return 2;
  }
  if (a.backend == "cuda") {  // the CUDA backend opened above: this machine has a GPU
    const int found = static_cast<int>(het::node::describe_node().gpus.size());
    if (a.gpus > found) {
      std::cerr << "error: --gpus " << a.gpus << ": this machine has " << found << " CUDA GPU" << (found == 1 ? "" : "s") << "\n";
      return 2;
    }
    lj.devices = het::launch::spread_over_gpus(lj.world, a.gpus > 0 ? a.gpus : found);
    std::string map;
    for (int r = 0; r < lj.world; ++r) map += (r ? ", " : "") + std::to_string(r) + "→cuda:" + std::to_string(lj.devices[std::size_t(r)]);
    std::cout << "ranks on GPUs: " << map << "\n";
  }
  // Each rank gets an equal share of the cores unless told otherwise; one thread each when
  // dilated (its compute is then timed in CPU time, runtime/pace.hpp).
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  const int threads = a.threads > 0 ? a.threads : a.time_dilation > 1 ? 1 : std::max(1, cores / lj.world);
  auto& w = lj.worker;
  w.plan = *a.files.plan, w.model = a.files.model, w.cluster = a.files.cluster, w.data = a.data;
  w.steps = a.steps, w.seed = a.seed, w.lr = a.lr;
  w.backend = a.backend, w.threads = threads, w.time_dilation = a.time_dilation;
  w.emulate_links = a.emulate_links, w.emulate_devices = a.emulate_devices;
  w.checkpoint_dir = a.checkpoint_dir, w.resume = a.resume, w.checkpoint_every = a.checkpoint_every, w.checkpoint_keep = a.checkpoint_keep;
  w.die_rank = a.die_rank, w.die_step = a.die_step;
  // Ranks that contend for the cores: more busy threads than cores, or dilated ranks that keep
  // more than an eighth of the cores busy (runtime/pace.hpp quiet_dilation). Their step times are
  // not the plan's.
  const int busy = lj.world * threads, quiet = het::runtime::quiet_dilation(busy, cores);
  if (a.backend == "cpu" && (a.time_dilation > 1 ? a.time_dilation < quiet : busy > cores)) {
    std::cout << "note: " << lj.world << " ranks × " << threads << " thread" << (threads == 1 ? "" : "s") << " share " << cores << " cores";
    if (a.time_dilation > 1) std::cout << " at time dilation " << a.time_dilation;
    std::cout << ", so they contend and the step times will not match `hetplan simulate`; run with --time-dilation " << quiet
              << " (and simulate with the same) to measure what the plan predicts\n";
  }
  std::string trace_dir;
  if (a.trace || a.traffic || a.stats) {
    trace_dir = (std::filesystem::temp_directory_path() / "hetexec-trace-XXXXXX").string();
    if (!mkdtemp(trace_dir.data())) {
      std::cerr << "error: cannot create a directory for the trace\n";
      return 2;
    }
    if (a.trace) w.trace_events = trace_dir + "/rank";
    if (a.traffic || a.stats) w.traffic_events = trace_dir + "/traffic";
  }
  // The output files, opened before the run so that a path that cannot be written costs nothing.
  std::ofstream metrics, trace_out, traffic_out;
  for (auto [path, out] : {std::pair{&a.metrics_out, &metrics}, std::pair{&a.trace, &trace_out}, std::pair{&a.traffic, &traffic_out}}) {
    if (!*path) continue;
    out->open(**path);
    if (!*out) {
      std::cerr << "error: cannot write " << **path << "\n";
      return 2;
    }
  }
  std::cout << "running " << lj.world << " ranks of " << *a.files.plan << " for "
            << (first_step > 0 ? "steps " + std::to_string(first_step) + " to " + std::to_string(a.steps - 1) : std::to_string(a.steps) + " steps")
            << " on the "
            << a.backend << " backend, " << threads << " thread" << (threads == 1 ? "" : "s") << " per rank\n";
  auto [stage_of_rank, predicted_memory] = het::cli::rank_memory_predictions(job->plan, a.backend);
  auto result = het::launch::run_local(
      lj, het::cli::StepPrinter(metrics.is_open() ? &metrics : nullptr, job->plan.model.training.zero_stage >= 1)
              .with_ranks(stage_of_rank, predicted_memory));
  if (!result) {  // the root cause, with its kind (launch/cause.hpp)
    for (const auto& e : result.errors()) std::cerr << "error: " << het::to_string(e.kind) << ": " << e.to_string() << "\n";
    return 1;
  }
  if (result->interrupted_by) {
    std::cerr << "interrupted (" << (result->interrupted_by == SIGINT ? "SIGINT" : "SIGTERM") << "): stopped all " << lj.world
              << " ranks\n";
    return 128 + result->interrupted_by;
  }
  if (a.trace) {  // every rank's events in one Chrome trace, from the first event on
    std::vector<het::sim::TraceEvent> all;
    for (int r = 0; r < lj.world; ++r) {
      const std::string file = trace_dir + "/rank." + std::to_string(r);
      auto in = het::input::read_file(file);
      if (!in) {  // a rank that wrote nothing; or too much (a cap as for every input)
        if (std::filesystem::exists(file))
          std::cerr << "warning: " << in.errors().front().to_string() << ": rank " << r << "'s events are left out\n";
        continue;
      }
      for (const auto& e : nlohmann::json::parse(*in))
        all.push_back({e[0].get<std::string>(), e[1].get<std::string>(), e[2].get<double>(), e[3].get<double>(), e[4].get<double>()});
    }
    double t0 = all.empty() ? 0 : all.front().start_s;
    for (const auto& e : all) t0 = std::min(t0, e.start_s);
    for (auto& e : all) e.start_s -= t0;
    trace_out << het::sim::chrome_trace(all);
    std::cout << "trace: " << *a.trace << " (" << all.size() << " events; open in https://ui.perfetto.dev)\n";
  }
  if (a.traffic || a.stats) {  // every rank's bytes, measured and by the program
    // Elements: TCP carries fp32 (4 bytes), the device hops bf16 (2), the program counts fp32.
    nlohmann::json ranks = nlohmann::json::array();
    std::uint64_t tcp = 0, device = 0, program = 0;
    for (int r = 0; r < lj.world; ++r) {
      auto in = het::input::read_file(trace_dir + "/traffic." + std::to_string(r));
      if (!in) continue;
      ranks.push_back(nlohmann::json::parse(*in));
      const auto& rank = ranks.back();
      for (const char* kind : {"activations", "gradients"}) {
        tcp += rank["measured"][kind]["sent"].get<std::uint64_t>();
        program += rank["program"][kind]["sent"].get<std::uint64_t>();
        if (rank.contains("device")) device += rank["device"][kind]["sent"].get<std::uint64_t>();
      }
    }
    const std::uint64_t elements = tcp / 4 + device / 2;
    if (a.traffic) {
      traffic_out << nlohmann::json{{"ranks", ranks}}.dump(1) << "\n";
      std::cout << "traffic between stages: " << elements << " elements sent (" << tcp << " bytes over TCP as fp32"
                << (device ? ", " + std::to_string(device) + " bytes device to device as bf16" : std::string())
                << "), the rank program's " << program / 4 << (elements == program / 4 ? "" : " (they differ)") << "; per rank in "
                << *a.traffic << "\n";
    }
    if (a.stats) print_device_stats(ranks);
  }
  if (!trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(trace_dir, ec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The CPU backend allocates activations per micro-batch; keeping freed memory in the process
  // (no mmap per large buffer, no trimming) avoids re-faulting pages on every micro-batch,
  // which cost ~45% of a tiny model's step time.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  CLI::App app{"hetexec: runs hetplan plans on CPUs and NVIDIA GPUs"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);
  het::cli::MachineCommands machine(app, het::kVersion);
  std::string text_file, output;
  auto* prepare = app.add_subcommand("prepare-data", "Byte-tokenize a text file into an llm.c token file");
  prepare->add_option("text", text_file, "the text file")->required();
  prepare->add_option("-o,--output", output, "the token file to write")->required();

  JobArgs job;
  auto* local = app.add_subcommand("run-local", "Train with a plan, every rank a local process over TCP");
  local->add_option("plan", job.files.plan, "plan.json")->required();
  local->add_option("--model", job.files.model, "model.yaml, replacing the plan's own");
  local->add_option("--cluster", job.files.cluster, "cluster.yaml, replacing the plan's own");
  local->add_option("--steps", job.steps, "training steps (default 10)")->check(CLI::PositiveNumber);
  local->add_option("--seed", job.seed, "seed of the weights and of synthetic data (default 1)");
  local->add_option("--lr", job.lr, "AdamW learning rate (default 1e-3)")
      ->check(het::cli::learning_rate());
  local->add_option("--data", job.data, "llm.c token file (default: a synthetic stream)");
  local->add_option("--backend", job.backend, "cpu (default) or cuda (CUDA builds, on a GPU; tp = cp = 1 only)");
  local->add_option("--threads", job.threads, "CPU threads per rank (default: the cores shared out among the ranks)")
      ->check(CLI::NonNegativeNumber);
  local->add_flag("--emulate-links", job.emulate_links, "shape each connection to its link in the plan's cluster (a node's links shared by its ranks, as the planner costs them)");
  local->add_option("--time-dilation", job.time_dilation,
                    "run every rank's compute and every shaped link X times slower, so many ranks share few cores without "
                    "contending (predict it with hetplan simulate --time-dilation X); each piece of compute takes X times "
                    "the median of its last 9 times in the run, as a device runs the same work in the same time")
      ->check(CLI::Range(1.0, 1000.0));
  local->add_flag("--emulate-devices", job.emulate_devices,
                "slow each rank's compute by (fastest device peak / its device peak)");

  local->add_option("--metrics-out", job.metrics_out, "write JSON lines {step, loss, step_s, tokens_per_s}, then {memory: [each rank's peak]}");
  local->add_option("--gpus", job.gpus, "cuda backend: spread the ranks over this many GPUs, rank r on GPU r mod N (default: all)")
      ->check(CLI::PositiveNumber);
  local->add_option("--hang-timeout", job.hang_timeout,
                    "call a rank hung and stop the run when no rank has made progress for this many seconds (default: "
                    "five predicted steps as the run executes them, at least 10; 0: never)")
      ->check(CLI::Range(0.0, 86400.0));
  local->add_option("--checkpoint-dir", job.checkpoint_dir,
                    "write checkpoints under this directory (each rank its part, in safetensors files; docs/checkpoints.md)");
  local->add_option("--checkpoint-every", job.checkpoint_every, "with --checkpoint-dir: a checkpoint after every N steps and after the last")
      ->check(CLI::PositiveNumber);
  local->add_option("--keep", job.checkpoint_keep, "with --checkpoint-dir: keep the newest K checkpoints (default: all)")
      ->check(CLI::PositiveNumber);
  local->add_option("--resume", job.resume,
                    "start from a checkpoint (its directory, or a --checkpoint-dir: the newest complete one), on this plan or any "
                    "other of the same model; --steps counts from the start of training");
  local->add_option("--fault-die-rank", job.die_rank, "a test's fault: this rank dies halfway through writing a checkpoint")
      ->group("")->check(CLI::NonNegativeNumber);
  local->add_option("--fault-die-step", job.die_step, "a test's fault: the step of the checkpoint --fault-die-rank dies writing")
      ->group("")->check(CLI::PositiveNumber);
  local->add_option("--trace", job.trace, "write every rank's timeline as a Chrome trace (the simulator's event names)");
  local->add_flag("--stats", job.stats,
                  "device backends: print per rank and step the bytes between host and device, the synchronisations with the "
                  "device (inside forward and backward, and of those not for a transfer) and the bytes sent device to device");
  local->add_option("--traffic-out", job.traffic,
                    "write every rank's bytes by kind, measured by the transport, beside the rank program's (JSON)");
  auto* worker = app.add_subcommand("worker", "One rank of a job (started by run-local or an agent)");
  worker->group("");  // not for people
  std::string worker_job;
  int worker_rank = 0, worker_device = -1;
  worker->add_option("--job", worker_job, "the job file run-local or the agent wrote (launch/worker_job.hpp)")->required();
  worker->add_option("--rank", worker_rank, "this rank")->required()->check(CLI::NonNegativeNumber);
  worker->add_option("--device", worker_device, "the CUDA device ordinal of this rank (cuda backend)")->check(CLI::NonNegativeNumber);
  std::string worker_holder;
  worker->add_option("--holder", worker_holder, "the device this rank runs on, SUB/NODE:DEVICE (an agent's node and device)");
  het::cli::ControlCommands control(app, het::kVersion);
  het::cli::CheckpointCommands checkpoints(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (int code = control.run(); code >= 0) return code;
  if (int code = machine.run(); code >= 0) return code;
  if (int code = checkpoints.run(); code >= 0) return code;
  if (prepare->parsed()) return run_prepare_data(text_file, output);
  if (local->parsed()) return run_local(job);
  if (worker->parsed()) {
    auto w = het::launch::read_worker_job(worker_job);
    if (!w) {
      for (const auto& e : w.errors()) std::cerr << "error: " << e.to_string() << "\n";
      return 2;
    }
    if (worker_rank >= w->world) {
      std::cerr << "error: --rank " << worker_rank << ": the job has " << w->world << " ranks\n";
      return 2;
    }
    return run_worker(*w, worker_rank, worker_device, worker_holder);
  }
  return 2;
}
