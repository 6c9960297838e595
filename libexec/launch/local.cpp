#include "launch/local.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace het::launch {

namespace {
std::string last_line(const std::string& file) {
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}
}  // namespace

Result<LocalResult> run_local(const LocalJob& job, const std::function<void(const std::string&)>& on_line) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / "hetexec-XXXXXX").string();
  if (!mkdtemp(dir.data())) return Diagnostic{"", 0, 0, "", std::string("cannot create a rendezvous directory: ") + std::strerror(errno)};
  int out_pipe[2];
  if (pipe(out_pipe) != 0) return Diagnostic{"", 0, 0, "", "pipe failed"};
  std::vector<pid_t> pids;
  auto stop_all = [&] {
    for (pid_t p : pids) kill(p, SIGTERM);
  };
  // SIGINT and SIGTERM arrive as reads of a signalfd while the run lasts (no handler, no global
  // state); the workers start with the usual signal mask.
  sigset_t stop_signals, previous, none;
  sigemptyset(&stop_signals), sigemptyset(&none);
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
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  for (int r = 0; r < job.world; ++r) {
    std::vector<std::string> argv = {job.executable, "worker", "--rank", std::to_string(r), "--world",
                                     std::to_string(job.world), "--rendezvous", dir};
    argv.insert(argv.end(), job.worker_args.begin(), job.worker_args.end());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (r == 0) posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    const std::string log = dir + "/rank-" + std::to_string(r) + ".log";
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      stop_all();
      posix_spawnattr_destroy(&attr);
      return Diagnostic{"", 0, 0, "", "cannot start the worker for rank " + std::to_string(r) + ": " + std::strerror(rc)};
    }
    pids.push_back(pid);
  }
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);

  LocalResult result;
  std::string pending, failure;
  // Failed ranks; the root cause is chosen once all have exited: a rank killed by a signal we
  // did not send, else one whose error is not a peer's disappearance, else the first.
  struct Failed {
    int rank;
    std::string why;
    int score;
  };
  std::vector<Failed> failed;
  std::vector<bool> stopped_by_us(pids.size(), false);
  std::vector<bool> done(pids.size(), false);
  std::size_t finished = 0;
  bool stream_open = true;
  while (finished < pids.size()) {
    pollfd fds[2] = {{sig_fd, POLLIN, 0}, {stream_open ? out_pipe[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, stream_open ? 100 : 20) > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info{};
      if (read(sig_fd, &info, sizeof info) == ssize_t(sizeof info) && !result.interrupted_by) {
        result.interrupted_by = int(info.ssi_signo);
        for (std::size_t k = 0; k < pids.size(); ++k)
          if (!done[k]) stopped_by_us[k] = true, kill(pids[k], SIGTERM);
      }
    }
    if (stream_open) {
      if (fds[1].revents & (POLLIN | POLLHUP)) {
        char buf[4096];
        ssize_t n = read(out_pipe[0], buf, sizeof buf);
        if (n <= 0) {
          stream_open = false;
        } else {
          pending.append(buf, std::size_t(n));
          for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
            result.lines.push_back(pending.substr(0, nl));
            if (on_line) on_line(result.lines.back());
          }
        }
      }
    }
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      ++finished;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok || (stopped_by_us[r] && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)) continue;
      // Ctrl-C in a terminal reaches the workers too (one process group): an interruption.
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT && !result.interrupted_by) {
        result.interrupted_by = SIGINT;
        for (std::size_t k = 0; k < pids.size(); ++k)
          if (!done[k]) stopped_by_us[k] = true, kill(pids[k], SIGTERM);
      }
      if (result.interrupted_by) continue;  // ranks that lost their peers on the way down
      std::string why = last_line(dir + "/rank-" + std::to_string(r) + ".log");
      int score = 1;
      if (WIFSIGNALED(status)) {
        why = "killed by signal " + std::to_string(WTERMSIG(status)) + (why.empty() ? "" : "; " + why);
        score = 3;
      } else if (why.find("closed the connection") == std::string::npos && why.find("reset by") == std::string::npos &&
                 why.find("no data from rank") == std::string::npos) {
        score = 2;
      }
      if (why.empty()) why = "exit status " + std::to_string(WEXITSTATUS(status));
      failed.push_back({int(r), why, score});
      if (failed.size() == 1) {
        usleep(200000);  // let the root cause exit too before stopping everyone
        for (std::size_t k = 0; k < pids.size(); ++k)
          if (!done[k]) stopped_by_us[k] = true, kill(pids[k], SIGTERM);
      }
    }
  }
  close(out_pipe[0]);
  if (!failed.empty() && !result.interrupted_by) {
    const Failed* root = &failed.front();
    for (const auto& f : failed)
      if (f.score > root->score) root = &f;
    failure = "rank " + std::to_string(root->rank) + " failed: " + root->why;
  }
  std::error_code ec;
  if (failure.empty()) fs::remove_all(dir, ec);
  else failure += " (logs in " + dir + ")";
  if (!failure.empty()) return Diagnostic{"", 0, 0, "", failure};
  return result;
}

}  // namespace het::launch
