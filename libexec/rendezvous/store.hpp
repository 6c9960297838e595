#pragma once
// The rendezvous server's memory: a key/value store per job id, safe to use from many
// threads, bounded so that no client can make it grow without limit. Job ids and keys follow
// valid_key (rendezvous.hpp). A key may be put again: the last value wins.
//
// Every operation answers a StoreStatus; its code says how a server should answer the call
// (rendezvous/service maps them to gRPC codes).
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace het::rendezvous {

struct Limits {
  std::size_t max_value_bytes = std::size_t(1) << 20;     // per value
  std::size_t max_keys_per_job = 100'000;
  std::size_t max_bytes_per_job = std::size_t(256) << 20;  // keys and values together
  std::size_t max_jobs = 1'000;
  double max_wait_s = 3600;                                // longest wait a caller may ask for
};

struct StoreStatus {
  enum class Code {
    ok,
    invalid,     // a malformed job id or key, a timeout out of range
    not_found,   // get: no such key
    too_large,   // a value over the limit
    full,        // a job's keys or bytes, or the number of jobs, at the limit
    timed_out,   // wait: the key did not appear in time
    cancelled,   // wait: the caller gave up
    closed,      // the store was closed (its server is stopping)
  };
  Code code = Code::ok;
  std::string message;  // for people; empty when ok
  bool ok() const { return code == Code::ok; }
};

class Store {
 public:
  explicit Store(Limits limits = {});
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  StoreStatus put(const std::string& job, const std::string& key, std::string value);
  // Copies the value into *value when found.
  StoreStatus get(const std::string& job, const std::string& key, std::string* value) const;
  // Blocks until the key exists (copying its value into *value), `timeout_s` passes
  // (timed_out), `cancelled()` turns true (checked every 50 ms) or the store is closed.
  // timeout_s must be in (0, limits.max_wait_s].
  StoreStatus wait(const std::string& job, const std::string& key, double timeout_s, std::string* value,
                   const std::function<bool()>& cancelled = {});
  // Forgets a job's keys (when the job ends).
  void drop(const std::string& job);
  // Wakes every waiter with `closed`; later waits answer `closed` at once.
  void close();

  const Limits& limits() const { return limits_; }

 private:
  struct Job {
    std::map<std::string, std::string> values;
    std::size_t bytes = 0;
  };
  StoreStatus check_names(const std::string& job, const std::string& key) const;

  const Limits limits_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // a put happened, or close
  std::map<std::string, Job> jobs_;
  bool closed_ = false;
};

}  // namespace het::rendezvous
