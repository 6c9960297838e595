// `hetexec devices` and `hetexec profile`: what this machine has (node/node.hpp), as a cluster
// (node/cluster_yaml.hpp), and what a model's units cost on it (profiler/profiler.hpp).
#include "machine_commands.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "input/input.hpp"
#include "job/placement.hpp"
#include "node/cluster_yaml.hpp"
#include "node/measure.hpp"
#include "node/node.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "spec/hf_config.hpp"
#include "spec/profile.hpp"
#include "units/units.hpp"

namespace het::cli {

namespace {

int report(const Diagnostics& errors, int code = 2) {
  for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
  return code;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  gmtime_r(&now, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &t);
  return buf;
}

std::string percent(double fraction) {
  if (!std::isfinite(fraction)) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * fraction);
  return buf;
}

// The catalog's type of a GPU (job::catalog_type: its name matched by whole words, the nearest
// memory), "" when the catalog has none: the one rule for `profile --backend cuda` and
// `devices --format cluster`, so that the profile and the cluster name the same type.
std::string catalog_type_of(const node::GpuInfo& gpu, const DeviceCatalog& catalog) {
  return job::catalog_type(gpu.name, gpu.memory_bytes, catalog);
}

// Writes `text` to `path`, or to stdout without one; false (after saying so) when it cannot.
bool emit(const std::string& text, const std::optional<std::string>& path) {
  if (!path) {
    std::cout << text;
    return true;
  }
  std::ofstream out(*path);
  out << text;
  out.close();
  if (!out) std::cerr << "error: cannot write " << *path << "\n";
  return bool(out);
}

}  // namespace

MachineCommands::MachineCommands(CLI::App& app, std::string version) : version_(std::move(version)) {
  devices_ = app.add_subcommand("devices", "List this node's CPU, CUDA GPUs and RDMA devices, or write it as a cluster.yaml");
  devices_->add_option("--format", format_,
                       "output: text, json, or cluster (this machine as a hetplan cluster.yaml, its cores and loopback link "
                       "measured: about a second)")
      ->check(CLI::IsMember({"text", "json", "cluster"}));
  devices_->add_option("-o,--output", devices_out_, "write to this file instead of stdout");

  profile_ = app.add_subcommand("profile", "Measure the unit costs of a model on this machine's backend");
  profile_->add_option("--backend", backend_, "cpu (default) or cuda (CUDA builds, on a GPU; tp 1 only)");
  profile_->add_option("--threads", threads_, "CPU threads (default: every core); with 1, runs are timed by the thread's CPU time")
      ->check(CLI::NonNegativeNumber);
  profile_->add_option("--tp", options_.tp, "tensor-parallel degrees to measure a shard of (default 1)")->check(CLI::PositiveNumber);
  profile_->add_option("--model", model_, "model.yaml, or a Hugging Face config.json (or its directory) with --training")->required();
  profile_->add_option("--training", training_, "the training fields (seq_length, dtype, training) of a Hugging Face config.json given as --model");
  profile_->add_option("--micro-batch", options_.micro_batch_sizes, "micro-batch sizes (default 1 2 4)");
  profile_->add_option("--repeats", options_.stop.min_runs,
                       "timed runs per point in each round, after two warm-ups; at least two rounds (default 10)")
      ->check(CLI::PositiveNumber);
  profile_->add_option("--spread", spread_percent_,
                       "then measure a point until the 95% interval of each median is within +-this many percent (default 1)")
      ->check(CLI::NonNegativeNumber);
  profile_->add_option("--max-seconds", options_.stop.max_seconds, "or for at most this long per point (default 1; X times as long under --time-dilation X)")
      ->check(CLI::NonNegativeNumber);
  profile_->add_option("--device", options_.device,
                       "device type the profile is for (as in the cluster; default: cpu, or the catalog's type of the GPU)");
  profile_->add_option("--devices", where_, "where to measure: cpu, or cuda:N (CUDA device N, the cuda backend)");
  profile_->add_option("--slowdown", options_.slowdown, "multiply the times (an emulated slower device)")->check(CLI::PositiveNumber);
  profile_->add_option("--cp", options_.cp, "context-parallel degrees to measure a member of (default 1)")->check(CLI::PositiveNumber);
  profile_->add_option("--time-dilation", options_.time_dilation,
                       "measure as a run with --time-dilation X computes: each timed operation followed by a pause of X - 1 times "
                       "it (the times stay this machine's; predict the run with hetplan simulate --time-dilation X)")
      ->check(CLI::Range(1.0, 1000.0));
  profile_->add_option("-o,--output", profile_out_, "profile.yaml to write")->required();
}

int MachineCommands::run() {
  if (devices_->parsed()) return run_devices();
  if (profile_->parsed()) return run_profile();
  return -1;
}

int MachineCommands::run_devices() {
  const auto n = node::describe_node();
  if (format_ == "json") return emit(node::to_json(n).dump(2) + "\n", devices_out_) ? 0 : 2;
  if (format_ == "text") {
    std::ostringstream out;
    out << "node " << n.hostname << "\n";
    out << "  cpu   " << n.cpu.cores << " cores, " << gib(n.cpu.memory_bytes) << ", " << n.cpu.model << "\n";
    for (const auto& g : n.gpus)
      out << "  cuda:" << g.index << "  " << g.name << ", " << gib(g.memory_bytes) << ", sm_" << g.compute_capability << ", "
          << g.pci_bus_id << "\n";
    for (const auto& r : n.rdma) out << "  rdma  " << r.name << ", " << r.ports << " ports, guid " << r.guid << "\n";
    for (const auto& note : n.notes) out << "  note: " << note << "\n";
    return emit(out.str(), devices_out_) ? 0 : 2;
  }
  // cluster
  const auto catalog = builtin_catalog();
  if (!catalog) return report(catalog.errors(), 1);
  node::MachineFacts facts;
  facts.node = n;
  facts.version = version_;
  facts.measured_at = utc_now();
  for (const auto& g : n.gpus) facts.gpu_types.push_back(catalog_type_of(g, *catalog));
  if (n.gpus.empty()) {
    std::cerr << "measuring one core's GEMM and memcpy rates and the loopback TCP link between two ranks\n";
    facts.core = node::measure_core();
    auto link = node::measure_loopback();
    if (!link) return report(link.errors(), 1);
    facts.loopback = *link;
  }
  auto text = node::cluster_yaml(facts, *catalog);
  if (!text) return report(text.errors());
  // What is written must read back as a cluster: checked here rather than trusted.
  auto doc = input::parse(*text, devices_out_.value_or("the cluster"));
  Result<ClusterSpec> cluster = doc ? read_cluster(doc->file, doc->root, "", *catalog) : Result<ClusterSpec>(doc.errors());
  if (!cluster) {
    std::cerr << "error: internal: the cluster written for this machine does not read back:\n";
    return report(cluster.errors(), 1);
  }
  if (!emit(*text, devices_out_)) return 2;
  if (devices_out_) {
    const auto& s = cluster->subclusters[0];
    std::cout << "wrote " << *devices_out_ << ": subcluster " << s.name << ", " << s.devices_per_node << " " << s.device.type
              << " device" << (s.devices_per_node == 1 ? "" : "s") << " of " << units::format(s.device.memory, units::Dimension::bytes)
              << ", peak " << units::format(s.device.peak, units::Dimension::flops) << ", memory bandwidth "
              << units::format(s.device.mem_bandwidth, units::Dimension::bandwidth) << ", intra-node link "
              << units::format(s.intra_node.bandwidth, units::Dimension::bandwidth) << " / "
              << units::format(s.intra_node.latency, units::Dimension::time) << "\n";
  }
  return 0;
}

int MachineCommands::run_profile() {
  auto m = load_model(model_, training_);
  if (!m) return report(m.errors());
  int ordinal = -1;
  if (where_) {  // "cpu" or "cuda:N"; agrees with --backend when both are given
    const std::string& d = *where_;
    const bool cuda = d.rfind("cuda:", 0) == 0;
    const std::string index = cuda ? d.substr(5) : "";
    if (!(d == "cpu" || (cuda && !index.empty() && index.size() < 4 && index.find_first_not_of("0123456789") == std::string::npos))) {
      std::cerr << "error: --devices: expected cpu or cuda:N, got '" << d << "'\n";
      return 2;
    }
    const std::string kind = cuda ? "cuda" : "cpu";
    if (profile_->get_option("--backend")->count() > 0 && backend_ != kind) {
      std::cerr << "error: --devices " << d << " runs the " << kind << " backend, but --backend says " << backend_ << "\n";
      return 2;
    }
    backend_ = kind;
    if (cuda) ordinal = std::stoi(index);
  }
  auto be = backend::open(backend_, threads_, ordinal);
  if (!be) return report(be.errors());
  if (backend_ == "cuda" && profile_->get_option("--device")->count() == 0) {  // the type of the GPU, from the catalog
    const auto gpus = node::describe_node().gpus;
    const auto catalog = builtin_catalog();
    const std::size_t at = std::size_t(std::max(0, ordinal));
    const std::string type = catalog && at < gpus.size() ? catalog_type_of(gpus[at], *catalog) : "";
    if (type.empty()) {
      std::cerr << "error: the device catalog has no type for "
                << (at < gpus.size() ? gpus[at].name : "CUDA device " + std::to_string(at)) << "; name it with --device\n";
      return 2;
    }
    options_.device = type;
    std::cout << "device type " << type << " (the catalog's, for " << gpus[at].name << ")\n";
  }
  // The CPU backend on one thread computes on the calling thread alone (a oneTBB limit of one),
  // so that thread's CPU time is the run's time without the time other processes took the core.
  const int threads = threads_ > 0 ? threads_ : int(std::thread::hardware_concurrency());
  options_.clock = backend_ == "cpu" && threads == 1 ? profiler::Clock::thread_cpu : profiler::Clock::wall;
  options_.stop.target = spread_percent_ / 100;
  const std::string clock = options_.clock == profiler::Clock::thread_cpu
                                ? "the measuring thread's CPU time (one thread: time descheduled by other processes does not count)"
                                : "wall time";
  std::cout << "profiling " << m->name << " on " << (*be)->describe() << ", timed by "
            << (options_.clock == profiler::Clock::thread_cpu ? "the thread's CPU time" : "wall time") << "\n";
  std::cout << " unit        tp   mbs   forward_s   backward_s   activations_B   spread  runs\n";
  auto on_row = [](const ProfileRow& r, const profiler::Spread& s) {
    char buf[200];
    std::snprintf(buf, sizeof buf, " %-10s %3d %5d  %10.6f  %11.6f  %14.0f  %7s  %4d", std::string(to_string(r.unit)).c_str(), r.tp,
                  r.micro_batch_size, r.forward, r.backward, r.activation_memory.value_or(0), percent(s.max()).c_str(), s.runs);
    std::cout << buf << std::endl;
  };
  Result<profiler::Profile> p = Diagnostic{"", 0, 0, "backend", "not run"};
  try {
    p = profiler::profile(**be, *m, options_, on_row);
    if (p && backend_ == "cpu") {  // what the transport adds to an emulated link on this machine
      // Under --time-dilation the messages are shaped as a dilated run's links shape them, so
      // that the threads wait as long as there (node/measure.hpp): the run's dilation is the
      // profile's over its slowdown (a device --emulate-devices slows s times is profiled at
      // X * s), applied to 30 us, the intra-node latency of bench/fidelity/cluster.yaml.
      const double run_dilation = std::max(1.0, options_.time_dilation / options_.slowdown);
      const double shaped = options_.time_dilation > 1 ? 30e-6 * run_dilation : 0;
      auto link = node::measure_loopback(shaped > 0 ? 0.5 : 0.15, shaped);
      if (!link) return report(link.errors());
      p->spec.transport = LinkSpec{link->bandwidth.value, link->latency.value};
      std::cout << " transport (loopback, two ranks" << (shaped > 0 ? ", under a shaped latency of " + std::to_string(int(shaped * 1e6)) + " us" : "")
                << "): " << link->latency.value * 1e6 << " us, " << link->bandwidth.value / 1e9 << " GB/s\n";
    }
  } catch (const std::exception& e) {  // a device backend's Stage throws what it cannot do
    std::cerr << "error: " << backend_ << " backend: " << e.what() << "\n";
    return 1;
  }
  if (!p) return report(p.errors());
  const auto& parts = p->optimizer_parts;
  const double parts_sum = parts.to_host + parts.pack + parts.adamw + parts.zero_grad;
  auto share = [&](double x) { return percent(parts_sum > 0 ? x / parts_sum : 0); };
  const std::string phases = "by phase: gradients to host " + share(parts.to_host) + " / pack " + share(parts.pack) + " / AdamW " +
                             share(parts.adamw) + " / zero_grad " + share(parts.zero_grad);
  std::cout << " optimizer step per layer: " << p->spec.optimizer_step[0].time << " s, spread " << percent(p->optimizer_step.max())
            << ", " << p->optimizer_step.runs << " runs (" << phases << ")\n";
  std::string tps;
  for (int tp : options_.tp) tps += (tps.empty() ? "" : ", ") + std::to_string(tp);
  char slowdown[32];
  std::snprintf(slowdown, sizeof slowdown, "%g", options_.slowdown);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", options_.stop.max_seconds);
  ProfileComments comments;
  comments.header = "Measured by `hetexec profile --backend " + backend_ + "` (hetexec " + version_ + ") on " + (*be)->describe() +
                    " for " + m->name + " at " + utc_now() + ": tp " + tps + ", slowdown " + slowdown +
                    (options_.time_dilation > 1 ? ", each operation followed by a pause of " + std::to_string(options_.time_dilation - 1).substr(0, 6) +
                                                      " times it (as a run with --time-dilation " +
                                                      std::to_string(options_.time_dilation).substr(0, 6) + " takes)"
                                                : std::string()) +
                    ".\nEvery time is the median of runs in rounds (in each, every point not yet known: a fresh stage, two\n"
                    "warm-ups, " + std::to_string(options_.stop.min_runs) +
                    " timed runs), at least two, until the 95% interval of the median was within +-" +
                    percent(options_.stop.target) + "\nof it or for " + seconds + " s per point, timed by " + clock +
                    ".\n`# spread` after a row: the larger of its forward's and backward's half-width of that interval, relative to\n"
                    "the time (a layer row's from those of the whole model, the embedding and the head), and the fewest runs.";
  std::map<std::tuple<UnitKind, int, int, int>, profiler::Spread> spread;
  for (std::size_t i = 0; i < p->spec.units.size(); ++i) {
    const auto& r = p->spec.units[i];
    spread[{r.unit, r.tp, r.cp, r.micro_batch_size}] = p->spread[i];
  }
  auto spread_comment = [](const profiler::Spread& s) {
    return "spread " + percent(s.max()) + " (forward " + percent(s.forward) + ", backward " + percent(s.backward) + "), " +
           std::to_string(s.runs) + " runs";
  };
  comments.row = [&](const ProfileRow& r) { return spread_comment(spread.at({r.unit, r.tp, r.cp, r.micro_batch_size})); };
  comments.optimizer_step = [&](const OptimizerStep&) {
    return "spread " + percent(p->optimizer_step.forward) + ", " + std::to_string(p->optimizer_step.runs) + " runs; " + phases;
  };
  std::ofstream out(profile_out_);
  out << write_profile(p->spec, comments);
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << profile_out_ << "\n";
    return 2;
  }
  double worst = 0;
  for (const auto& s : p->spread) worst = std::max(worst, s.max());
  std::cout << "wrote " << profile_out_ << ": " << p->spec.device << ", " << p->spec.units.size() << " rows, largest spread "
            << percent(worst) << "\n";
  return 0;
}

}  // namespace het::cli
