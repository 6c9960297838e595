#include "rendezvous/directory.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "input/input.hpp"
#include "rendezvous/store.hpp"

namespace het::rendezvous {

namespace {
Diagnostic problem(const std::string& dir, std::string what) { return Diagnostic{dir, 0, 0, "", std::move(what)}; }
std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}
}  // namespace

Result<Done> DirectoryRendezvous::publish(const std::string& key, const std::string& value) {
  namespace fs = std::filesystem;
  if (!valid_key(key)) return problem(dir_, "invalid rendezvous key '" + key + "'");
  // The temporary name is hidden (keys never start with '.') and unique per process and key.
  const fs::path tmp = fs::path(dir_) / ("." + key + "." + std::to_string(::getpid()) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << value;
    out.close();
    if (!out) return problem(dir_, "cannot write the rendezvous file " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, fs::path(dir_) / key, ec);  // atomic: readers see the whole value or nothing
  if (ec) return problem(dir_, "cannot publish '" + key + "': " + ec.message());
  return Done{};
}

Result<std::string> DirectoryRendezvous::wait(const std::string& key, double timeout_s) {
  namespace fs = std::filesystem;
  if (!valid_key(key)) return problem(dir_, "invalid rendezvous key '" + key + "'");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const fs::path file = fs::path(dir_) / key;
  for (;;) {
    std::error_code ec;
    if (fs::exists(file, ec)) {  // whole: publish() renames it into place
      auto value = input::read_file(file.string(), Limits{}.max_value_bytes);
      if (!value) return problem(dir_, "'" + key + "': " + value.errors().front().to_string());
      return value;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Diagnostic{dir_, 0, 0, "", "'" + key + "' was not published within " + seconds(timeout_s) + " s", ErrorKind::peer_lost};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace het::rendezvous
