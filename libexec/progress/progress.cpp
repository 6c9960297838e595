#include "progress/progress.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

namespace het::progress {

namespace {

// The file: one slot, written by one worker, read by its supervisor. `seq` is odd while the
// worker writes (a seqlock): a reader that sees it odd, or changed across its read, reads again.
struct Slot {
  std::atomic<std::uint64_t> seq;
  std::int32_t pid, step, activity, peer;
  char what[24];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the slot is shared between processes");
constexpr std::size_t kSize = sizeof(Slot);

std::string file_of(const std::string& dir, int rank) { return dir + "/progress." + std::to_string(rank); }

// The process state letter of /proc/PID/stat ('R', 'S', 'D', 'T', 't', 'Z', ...); 0 if unknown.
char process_state(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto paren = text.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : 0;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string where(const Snapshot& s) {
  std::string w = s.step < 0 ? std::string("while starting") : "at step " + std::to_string(s.step);
  if (!s.what.empty()) w += ", " + s.what;
  return w;
}

}  // namespace

const char* to_string(Activity a) {
  switch (a) {
    case Activity::starting: return "starting";
    case Activity::computing: return "computing";
    case Activity::receiving: return "receiving";
    case Activity::collective: return "in a collective";
    case Activity::finished: return "finished";
  }
  return "?";
}

Result<std::unique_ptr<Reporter>> Reporter::open(const std::string& dir, int rank) {
  const std::string file = file_of(dir, rank);
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Diagnostic{file, 0, 0, "", std::string("cannot create the progress file: ") + std::strerror(errno)};
  void* map = MAP_FAILED;
  if (ftruncate(fd, off_t(kSize)) == 0) map = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return Diagnostic{file, 0, 0, "", std::string("cannot map the progress file: ") + std::strerror(err)};
  std::unique_ptr<Reporter> r(new Reporter());
  r->map_ = map;
  auto* slot = new (map) Slot{};
  slot->pid = std::int32_t(getpid());
  r->at(-1, Activity::starting, "connecting");
  return r;
}

Reporter::~Reporter() {
  if (map_) munmap(map_, kSize);
}

void Reporter::at(int step, Activity activity, std::string_view what, int peer) {
  auto* slot = static_cast<Slot*>(map_);
  const std::uint64_t seq = slot->seq.load(std::memory_order_relaxed);
  slot->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot->step = step, slot->activity = std::int32_t(activity), slot->peer = peer;
  std::memset(slot->what, 0, sizeof slot->what);
  std::memcpy(slot->what, what.data(), std::min(what.size(), sizeof slot->what - 1));
  slot->seq.store(seq + 2, std::memory_order_release);
}

std::optional<Snapshot> read(const std::string& dir, int rank) {
  const int fd = ::open(file_of(dir, rank).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && std::size_t(st.st_size) >= kSize)
    map = mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  const auto* slot = static_cast<const Slot*>(map);
  Snapshot s;
  s.rank = rank;
  for (int tries = 0; tries < 1000; ++tries) {
    const std::uint64_t before = slot->seq.load(std::memory_order_acquire);
    if (before & 1) {
      std::this_thread::yield();
      continue;
    }
    s.pid = slot->pid, s.step = slot->step, s.activity = Activity(slot->activity), s.peer = slot->peer;
    char what[sizeof slot->what];
    std::memcpy(what, slot->what, sizeof what);
    what[sizeof what - 1] = 0;
    s.what = what;
    std::atomic_thread_fence(std::memory_order_acquire);
    s.beats = before / 2;
    if (slot->seq.load(std::memory_order_relaxed) == before) break;
  }
  munmap(map, kSize);
  if (s.activity < Activity::starting || s.activity > Activity::finished) s.activity = Activity::starting;
  return s;
}

double default_bound_s(double predicted_step_s, double slowdown) {
  return std::max(kFloorS, 5 * std::max(0.0, predicted_step_s) * std::max(1.0, slowdown));
}

double default_bound_s(const Plan& plan, double slowdown, bool emulate_devices) {
  if (emulate_devices) {
    double fastest = 0, slowest = 0;
    for (const auto& sc : plan.cluster.subclusters)
      fastest = std::max(fastest, sc.device.peak), slowest = slowest == 0 ? sc.device.peak : std::min(slowest, sc.device.peak);
    if (slowest > 0) slowdown *= fastest / slowest;
  }
  return default_bound_s(plan.predicted ? plan.predicted->iteration_s : 0, slowdown);
}

Watchdog::Watchdog(std::string dir, std::vector<int> ranks, double bound_s, bool all, Clock::time_point start)
    : dir_(std::move(dir)), ranks_(std::move(ranks)), bound_s_(bound_s), all_(all), last_(ranks_.size()), moved_(ranks_.size(), start),
      spawned_(ranks_.size(), 0) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) last_[i].rank = ranks_[i];
}

void Watchdog::spawned(int rank, int pid) {
  std::lock_guard lock(spawned_mu_);
  for (std::size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i] == rank) spawned_[i] = pid;
}

double Watchdog::still_s(Clock::time_point now) const {
  double most = 0;
  bool any = false;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (last_[i].activity == Activity::finished) continue;
    any = true;
    most = std::max(most, std::chrono::duration<double>(now - moved_[i]).count());
  }
  return any ? most : 0;
}

std::optional<Stall> Watchdog::check(Clock::time_point now) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    auto s = read(dir_, ranks_[i]);
    if (!s) continue;
    if (s->beats != last_[i].beats || s->pid != last_[i].pid) moved_[i] = now;
    last_[i] = *s;
  }
  // Stalled: none of the ranks still running moved within the bound.
  double least_still = -1;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (last_[i].activity == Activity::finished) continue;
    const double still = std::chrono::duration<double>(now - moved_[i]).count();
    least_still = least_still < 0 ? still : std::min(least_still, still);
  }
  if (least_still < bound_s_) return std::nullopt;
  bool starting = false;  // a rank still connecting (or not yet started) has kStartS
  for (const auto& s : last_) starting = starting || s.activity == Activity::starting;

  auto index_of = [&](int rank) -> int {
    for (std::size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i] == rank) return int(i);
    return -1;
  };
  auto blame = [&](std::size_t i, const std::string& because) {
    const Snapshot& s = last_[i];
    const double still = std::chrono::duration<double>(now - moved_[i]).count();
    return Stall{s.rank, false, "rank " + std::to_string(s.rank) + " hung: no progress for " + seconds(still) + " " + where(s) + ": " + because};
  };
  // 1. A stopped process (the one the rank published, else the one its supervisor started).
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    int pid = last_[i].pid;
    if (pid == 0) {
      std::lock_guard lock(spawned_mu_);
      pid = spawned_[i];
    }
    const char state = process_state(pid);
    if (state == 'T' || state == 't') return blame(i, "its process (pid " + std::to_string(pid) + ") is stopped (SIGSTOP or a debugger)");
  }
  if (starting && least_still < std::max(bound_s_, kStartS)) return std::nullopt;
  // 2. A rank inside a computation.
  for (std::size_t i = 0; i < ranks_.size(); ++i)
    if (last_[i].activity == Activity::computing) return blame(i, "it is inside a computation that does not end (the others wait for it)");
  // Beyond here the ranks wait; a supervisor that does not see every rank cannot tell whether
  // the one they wait for is elsewhere, unless a chain says so.
  auto elsewhere = [&](std::size_t i) {
    const double still = std::chrono::duration<double>(now - moved_[i]).count();
    return Stall{-1, true,
                 "rank " + std::to_string(last_[i].rank) + " made no progress for " + seconds(still) + " " + where(last_[i]) +
                     ": it is " + to_string(last_[i].activity) + " with ranks on other nodes"};
  };
  // 3. The end of a "waits for" chain.
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (last_[i].activity != Activity::receiving) continue;
    std::set<int> seen;
    std::size_t at = i;
    while (last_[at].activity == Activity::receiving && seen.insert(last_[at].rank).second) {
      const int next = index_of(last_[at].peer);
      if (next < 0) {
        const double still = std::chrono::duration<double>(now - moved_[at]).count();
        return Stall{last_[at].peer, true,
                     "rank " + std::to_string(last_[at].rank) + " made no progress for " + seconds(still) + " " + where(last_[at]) +
                         ": it waits for rank " + std::to_string(last_[at].peer) + " on another node"};
      }
      at = std::size_t(next);
    }
    if (last_[at].activity != Activity::receiving)
      return all_ ? blame(at, std::string("the ranks waiting for it wait in vain; it is ") + to_string(last_[at].activity)) : elsewhere(at);
    return blame(at, "the ranks wait for each other in a cycle (a deadlock)");
  }
  // 4. The rank that moved last longest ago.
  std::size_t oldest = ranks_.size();
  for (std::size_t i = 0; i < ranks_.size(); ++i)
    if (last_[i].activity != Activity::finished && (oldest == ranks_.size() || moved_[i] < moved_[oldest])) oldest = i;
  if (!all_) return elsewhere(oldest);
  return blame(oldest, std::string("it is ") + to_string(last_[oldest].activity) + " and no rank moved since");
}

}  // namespace het::progress
