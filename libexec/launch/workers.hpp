#pragma once
// The worker processes of one job on this machine (what `hetexec run-local` and a node agent
// start): each started with its own stdout and stderr pipes, read line by line, and reaped
// when it ends. run() supervises them on the calling thread until all have ended — a worker
// asks the kernel to stop it when that thread's process dies (PR_SET_PDEATHSIG), so the
// thread must live as long as the workers. stop() may be called from any thread.
#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "diag/diag.hpp"

namespace het::launch {

// `text` as valid UTF-8 that prints on one line: every byte that does not start a valid
// sequence (RFC 3629: no overlong forms, surrogates or code points above U+10FFFF), and every
// control character but tab, becomes U+FFFD. What workers print reaches statuses, logs and
// protobuf strings (which must be UTF-8) through this.
std::string valid_utf8(std::string_view text);

struct WorkerCommand {
  int rank = 0;
  std::vector<std::string> argv;  // argv[0] is the executable's path
};

struct WorkerEvent {
  // started: every worker has been spawned (one event per worker, with its pid, before any
  // line); line: it printed a line; exited: it ended.
  enum class Kind { started, line, exited } kind = Kind::line;
  int rank = 0;
  // line: what the worker printed (without the newline; at most 64 KiB of it, longer lines
  // cut; made valid_utf8)
  bool from_stderr = false;
  std::string text;
  // exited: the exit status, or the signal that ended it (then exit_code is -1)
  int exit_code = 0, signal = 0;
  bool stopped = false;  // ended after stop() asked it to
  int pid = 0;           // started: its process id
};

class WorkerGroup {
 public:
  WorkerGroup();
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every command and calls on_event (on this thread) for each line and each exit,
  // until every worker has ended. An error only when a worker cannot be started (the ones
  // already started are stopped first).
  Result<Done> run(const std::vector<WorkerCommand>& commands, const std::function<void(const WorkerEvent&)>& on_event);
  // Asks every running worker to end: SIGTERM, then SIGKILL after grace_s seconds.
  void stop(double grace_s = 2);

 private:
  std::atomic<bool> stop_requested_{false};
  std::atomic<double> grace_s_{2};
  int wake_fd_ = -1;  // eventfd that wakes run() when stop() is called
};

}  // namespace het::launch
