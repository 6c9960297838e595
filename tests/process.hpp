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

 private:
  std::string path_;
};

}  // namespace het::test
