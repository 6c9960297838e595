#pragma once
// Runs a program as a real child process and captures what it printed, for CLI tests.
#include <string>
#include <vector>

namespace het::test {

struct ProcessResult {
  int exit_code = -1;  // exit status, or -1 when killed by a signal
  int signal = 0;      // the signal that killed it, 0 if it exited
  std::string out, err;
};

// Runs argv[0] with argv (no shell), stdin from /dev/null, killing it after timeout_s.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 60);

// Pids of the processes whose command line holds every one of `words`.
std::vector<int> find_processes(const std::vector<std::string>& words);

// Whether process `pid` exists and has not exited (a zombie, not yet reaped, has).
bool alive(int pid);

// An executable on PATH, or "" when there is none.
std::string find_program(const std::string& name);

// A self-signed certificate (which is also its own CA) for `name`, valid for localhost and
// 127.0.0.1: writes DIR/name.pem and DIR/name.key. False when openssl failed.
bool make_certificate(const std::string& openssl, const std::string& dir, const std::string& name);

// A program running in the background (a daemon under test), its stdout and stderr going to
// files; killed with SIGKILL and reaped when the object goes away.
class Background {
 public:
  explicit Background(const std::vector<std::string>& argv);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  int pid() const { return pid_; }
  std::string out() const;  // what it printed so far
  std::string err() const;
  // Waits until its stdout holds `text` (true), or it exits or timeout_s passes (false).
  bool wait_for_output(const std::string& text, double timeout_s) const;
  void signal(int sig) const;
  // Waits for it to end (SIGKILL after timeout_s); its exit status like run_process.
  ProcessResult wait(double timeout_s);

 private:
  int pid_ = -1;
  bool reaped_ = false;
  std::string out_file_, err_file_, dir_;
};

// A fresh directory under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& content) const;
  // The same, readable and writable by the owner only (mode 0600: an agent's token file).
  std::string write_private(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

}  // namespace het::test
