#include "launch/workers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>

#include "input/input.hpp"

extern char** environ;

namespace het::launch {

namespace {
constexpr std::size_t kMaxLine = 64 << 10;

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends; -1 once closed
  std::string out_pending, err_pending;
  bool reaped = false;
};
}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = input::utf8_sequence(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    if (len > 1 || (len == 1 && ((c >= 0x20 && c != 0x7F) || c == '\t'))) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for an invalid byte or a control character
      i += len ? len : 1;
    }
  }
  return out;
}

WorkerGroup::WorkerGroup() : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
WorkerGroup::~WorkerGroup() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void WorkerGroup::stop(double grace_s) {
  grace_s_ = grace_s;
  stop_requested_ = true;
  const std::uint64_t one = 1;
  if (wake_fd_ >= 0) [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
}

Result<Done> WorkerGroup::run(const std::vector<WorkerCommand>& commands, const std::function<void(const WorkerEvent&)>& on_event) {
  std::vector<Worker> workers;
  auto kill_all = [&](int sig) {
    for (auto& w : workers)
      if (!w.reaped) kill(w.pid, sig);
  };
  auto close_fd = [](int& fd) {
    if (fd >= 0) close(fd), fd = -1;
  };
  for (const auto& cmd : commands) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) break;
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]), close(out[1]);
      break;
    }
    fcntl(out[0], F_SETFL, O_NONBLOCK), fcntl(err[0], F_SETFL, O_NONBLOCK);  // our ends only
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    std::vector<std::string> argv = cmd.argv;
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = args.size() > 1 ? posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ) : EINVAL;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(out[1]), close(err[1]);
    if (rc != 0) {
      close(out[0]), close(err[0]);
      kill_all(SIGKILL);
      for (auto& w : workers) waitpid(w.pid, nullptr, 0), close_fd(w.out), close_fd(w.err);
      return Diagnostic{"", 0, 0, "", "cannot start the worker of rank " + std::to_string(cmd.rank) + ": " + std::strerror(rc)};
    }
    workers.push_back({cmd.rank, pid, out[0], err[0], {}, {}, false});
  }
  if (workers.size() < commands.size()) {
    kill_all(SIGKILL);
    for (auto& w : workers) waitpid(w.pid, nullptr, 0), close_fd(w.out), close_fd(w.err);
    return Diagnostic{"", 0, 0, "", std::string("cannot create pipes for the workers: ") + std::strerror(errno)};
  }

  for (const auto& w : workers) on_event({WorkerEvent::Kind::started, w.rank, false, {}, 0, 0, false, int(w.pid)});
  auto emit_lines = [&](Worker& w, std::string& pending, bool from_stderr, bool flush) {
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
      on_event({WorkerEvent::Kind::line, w.rank, from_stderr, valid_utf8(std::string_view(pending).substr(0, std::min(nl, kMaxLine))), 0, 0, false});
    if (pending.size() > kMaxLine || (flush && !pending.empty())) {
      on_event({WorkerEvent::Kind::line, w.rank, from_stderr, valid_utf8(std::string_view(pending).substr(0, kMaxLine)), 0, 0, false});
      pending.clear();
    }
  };
  bool stopping = false;
  std::chrono::steady_clock::time_point kill_at{};
  std::size_t remaining = workers.size();
  while (remaining > 0) {
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}};
    std::vector<std::pair<Worker*, bool>> owners = {{nullptr, false}};
    for (auto& w : workers) {
      if (w.out >= 0) fds.push_back({w.out, POLLIN, 0}), owners.push_back({&w, false});
      if (w.err >= 0) fds.push_back({w.err, POLLIN, 0}), owners.push_back({&w, true});
    }
    poll(fds.data(), fds.size(), 100);
    if (fds[0].revents & POLLIN) {
      std::uint64_t n;
      [[maybe_unused]] auto r = read(wake_fd_, &n, sizeof n);
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [w, from_stderr] = owners[i];
      int& fd = from_stderr ? w->err : w->out;
      std::string& pending = from_stderr ? w->err_pending : w->out_pending;
      char buf[8192];
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) {
        pending.append(buf, std::size_t(n));
        emit_lines(*w, pending, from_stderr, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit_lines(*w, pending, from_stderr, true);
        close_fd(fd);
      }
    }
    if (stop_requested_ && !stopping) {
      stopping = true;
      kill_all(SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(grace_s_.load()));
    }
    if (stopping && std::chrono::steady_clock::now() > kill_at) kill_all(SIGKILL);
    for (auto& w : workers) {
      if (w.reaped) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      // Its output first: what it printed before it ended.
      for (int* fd : {&w.out, &w.err}) {
        if (*fd < 0) continue;
        const bool from_stderr = fd == &w.err;
        std::string& pending = from_stderr ? w.err_pending : w.out_pending;
        char buf[8192];
        ssize_t n;
        while ((n = read(*fd, buf, sizeof buf)) > 0) pending.append(buf, std::size_t(n));
        emit_lines(w, pending, from_stderr, true);
        close_fd(*fd);
      }
      w.reaped = true;
      --remaining;
      WorkerEvent e{WorkerEvent::Kind::exited, w.rank, false, "", -1, 0, stopping};
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      else if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      // A SIGKILL before this group sent one came from elsewhere: the worker did not end
      // because stop() asked it to (it may be the root cause of the stop).
      if (e.signal == SIGKILL && std::chrono::steady_clock::now() <= kill_at) e.stopped = false;
      on_event(e);
    }
  }
  return Done{};
}

}  // namespace het::launch
