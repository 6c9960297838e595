#include "launch/local.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "launch/cause.hpp"
#include "launch/workers.hpp"
#include "progress/progress.hpp"

namespace het::launch {

Result<LocalResult> run_local(const LocalJob& job, const std::function<void(const std::string&)>& on_line) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "hetexec-XXXXXX").string();
  if (!mkdtemp(dir.data())) return failure(ErrorKind::internal, std::string("cannot create a rendezvous directory: ") + std::strerror(errno));
  // SIGINT and SIGTERM arrive as reads of a signalfd while the run lasts (no handler, no global
  // state); the workers start with the usual signal mask (WorkerGroup).
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT), sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  const int sig_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  struct Restore {
    sigset_t mask;
    int fd;
    ~Restore() {
      if (fd >= 0) close(fd);
      pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    }
  } restore{previous, sig_fd};

  WorkerJob worker = job.worker;
  worker.world = job.world, worker.rendezvous = dir;
  if (job.hang_bound_s > 0) worker.progress_dir = dir;
  const std::string job_file = dir + "/job.json";
  if (auto written = write_worker_job(job_file, worker); !written) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return written.errors();
  }
  std::vector<WorkerCommand> commands;
  std::vector<std::ofstream> logs(std::size_t(job.world));
  for (int r = 0; r < job.world; ++r) {
    std::vector<std::string> argv = {job.executable, "worker", "--job", job_file, "--rank", std::to_string(r)};
    if (std::size_t(r) < job.devices.size()) argv.insert(argv.end(), {"--device", std::to_string(job.devices[std::size_t(r)])});
    commands.push_back({r, std::move(argv)});
    logs[std::size_t(r)].open(dir + "/rank-" + std::to_string(r) + ".log");
  }

  LocalResult result;
  WorkerGroup group;
  std::mutex mu;
  // Failed ranks; the root cause is chosen by kind once all have ended (cause.hpp): a rank
  // killed by a signal we did not send or hung, else one with an error of its own, else the
  // first that lost a peer.
  struct Failed {
    int rank;
    std::string why;
    ErrorKind kind;
  };
  std::vector<Failed> failed;
  std::map<int, std::string> last_error;
  std::atomic<bool> finished{false};
  std::atomic<int> interrupted_by{0};
  std::chrono::steady_clock::time_point stop_at = std::chrono::steady_clock::time_point::max();
  std::vector<int> ranks(std::size_t(job.world));
  for (int r = 0; r < job.world; ++r) ranks[std::size_t(r)] = r;
  progress::Watchdog watchdog(dir, ranks, job.hang_bound_s, true);
  auto next_check = std::chrono::steady_clock::now();
  // Watches for Ctrl-C and hung ranks, and stops the others a moment after the first failure
  // (so that the root cause, if it is still on its way out, ends by itself and is recognised).
  std::thread watcher([&] {
    while (!finished) {
      if (job.hang_bound_s > 0 && std::chrono::steady_clock::now() >= next_check) {
        next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
        if (auto stall = watchdog.check()) {
          std::lock_guard lock(mu);
          if (failed.empty() && !interrupted_by) {
            failed.push_back({stall->rank, stall->why, ErrorKind::hung});
            group.stop(2);  // SIGTERM, then SIGKILL: a stopped process ends by the second
          }
        }
      }
      pollfd pfd{sig_fd, POLLIN, 0};
      if (poll(&pfd, 1, 50) > 0 && (pfd.revents & POLLIN)) {
        signalfd_siginfo info{};
        if (read(sig_fd, &info, sizeof info) == ssize_t(sizeof info) && !interrupted_by) {
          interrupted_by = int(info.ssi_signo);
          group.stop(2);
        }
      }
      std::lock_guard lock(mu);
      if (std::chrono::steady_clock::now() >= stop_at) stop_at = std::chrono::steady_clock::time_point::max(), group.stop(2);
    }
  });
  auto run = group.run(commands, [&](const WorkerEvent& e) {
    std::lock_guard lock(mu);
    if (e.kind == WorkerEvent::Kind::started) {
      watchdog.spawned(e.rank, e.pid);
      return;
    }
    if (e.kind == WorkerEvent::Kind::line) {
      if (e.from_stderr) {
        logs[std::size_t(e.rank)] << e.text << "\n" << std::flush;
        if (!e.text.empty()) last_error[e.rank] = e.text;
      } else if (e.rank == 0) {
        result.lines.push_back(e.text);
        if (on_line) on_line(e.text);
      }
      return;
    }
    if ((e.signal == 0 && e.exit_code == 0) || (e.stopped && (e.signal == SIGTERM || e.signal == SIGKILL))) return;
    // Ctrl-C in a terminal reaches the workers too (one process group): an interruption.
    if (e.signal == SIGINT && !interrupted_by) interrupted_by = SIGINT, group.stop(2);
    if (interrupted_by) return;  // ranks that lost their peers on the way down
    std::string why = last_error.count(e.rank) ? last_error[e.rank] : "";
    if (e.signal) why = "killed by signal " + std::to_string(e.signal) + (why.empty() ? "" : "; " + why);
    if (why.empty()) why = "exit status " + std::to_string(e.exit_code);
    failed.push_back({e.rank, why, kind_of_exit(e.exit_code, e.signal)});
    if (failed.size() == 1) stop_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  });
  finished = true;
  watcher.join();
  result.interrupted_by = interrupted_by;
  if (!run) return run.errors();
  if (!failed.empty() && !result.interrupted_by) {
    std::vector<ErrorKind> kinds;
    for (const auto& f : failed) kinds.push_back(f.kind);
    const Failed& root = failed[root_cause(kinds)];
    // The watchdog's verdict names its rank already.
    return failure(root.kind, (root.kind == ErrorKind::hung ? root.why : "rank " + std::to_string(root.rank) + " failed: " + root.why) +
                                  " (logs in " + dir + ")");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return result;
}

std::vector<int> spread_over_gpus(int world, int gpus) {
  std::vector<int> out;
  for (int r = 0; r < world && gpus > 0; ++r) out.push_back(r % gpus);
  return out;
}

}  // namespace het::launch
