#include "rendezvous/store.hpp"

#include <algorithm>
#include <cstdio>

#include "rendezvous/rendezvous.hpp"

namespace het::rendezvous {

namespace {
using Code = StoreStatus::Code;
StoreStatus refuse(Code code, std::string message) { return {code, std::move(message)}; }
std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}
}  // namespace

Store::Store(Limits limits) : limits_(limits) {}

StoreStatus Store::check_names(const std::string& job, const std::string& key) const {
  if (!valid_key(job))
    return refuse(Code::invalid, "invalid job id '" + job.substr(0, 200) +
                                     "': expected 1 to 128 characters of [A-Za-z0-9._-], not starting with '.'");
  if (!valid_key(key))
    return refuse(Code::invalid, "invalid key '" + key.substr(0, 200) +
                                     "': expected 1 to 128 characters of [A-Za-z0-9._-], not starting with '.'");
  return {};
}

StoreStatus Store::put(const std::string& job, const std::string& key, std::string value) {
  if (auto bad = check_names(job, key); !bad.ok()) return bad;
  if (value.size() > limits_.max_value_bytes)
    return refuse(Code::too_large, "the value of '" + key + "' has " + std::to_string(value.size()) +
                                       " bytes; at most " + std::to_string(limits_.max_value_bytes) + " are allowed");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return refuse(Code::closed, "the rendezvous is shutting down");
    auto j = jobs_.find(job);
    if (j == jobs_.end()) {
      if (jobs_.size() >= limits_.max_jobs)
        return refuse(Code::full, "the rendezvous holds " + std::to_string(jobs_.size()) + " jobs, its limit");
      j = jobs_.emplace(job, Job{}).first;
    }
    Job& keys = j->second;
    const auto old = keys.values.find(key);
    const std::size_t old_bytes = old == keys.values.end() ? 0 : key.size() + old->second.size();
    if (old == keys.values.end() && keys.values.size() >= limits_.max_keys_per_job)
      return refuse(Code::full, "job '" + job + "' has " + std::to_string(keys.values.size()) + " keys, its limit");
    if (keys.bytes - old_bytes + key.size() + value.size() > limits_.max_bytes_per_job)
      return refuse(Code::full, "job '" + job + "' would hold more than " + std::to_string(limits_.max_bytes_per_job) +
                                    " bytes of keys and values, its limit");
    keys.bytes = keys.bytes - old_bytes + key.size() + value.size();
    keys.values[key] = std::move(value);
  }
  changed_.notify_all();
  return {};
}

StoreStatus Store::get(const std::string& job, const std::string& key, std::string* value) const {
  if (auto bad = check_names(job, key); !bad.ok()) return bad;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto j = jobs_.find(job);
  if (j != jobs_.end())
    if (const auto v = j->second.values.find(key); v != j->second.values.end()) {
      *value = v->second;
      return {};
    }
  return refuse(Code::not_found, "job '" + job + "' has no key '" + key + "'");
}

StoreStatus Store::wait(const std::string& job, const std::string& key, double timeout_s, std::string* value,
                        const std::function<bool()>& cancelled) {
  if (auto bad = check_names(job, key); !bad.ok()) return bad;
  if (!(timeout_s > 0 && timeout_s <= limits_.max_wait_s))
    return refuse(Code::invalid, "the wait's timeout must be more than 0 and at most " +
                                     seconds(limits_.max_wait_s) + " s, not " + seconds(timeout_s));
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (closed_) return refuse(Code::closed, "the rendezvous is shutting down");
    if (const auto j = jobs_.find(job); j != jobs_.end())
      if (const auto v = j->second.values.find(key); v != j->second.values.end()) {
        *value = v->second;
        return {};
      }
    const auto now = Clock::now();
    if (now >= deadline)
      return refuse(Code::timed_out, "job '" + job + "' has no key '" + key + "' after " + seconds(timeout_s) + " s");
    if (cancelled) {  // not under the lock: it is the caller's code
      lock.unlock();
      const bool gave_up = cancelled();
      lock.lock();
      if (gave_up) return refuse(Code::cancelled, "the caller cancelled the wait");
    }
    changed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(50)));
  }
}

void Store::drop(const std::string& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.erase(job);
}

void Store::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

}  // namespace het::rendezvous
