#include "transport/shared_link.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace het::transport {

static_assert(std::atomic<std::int64_t>::is_always_lock_free, "a shared link's word must be lock-free across processes");

SharedLink::SharedLink(std::atomic<std::int64_t>* free_at, void* mapped, std::string name)
    : free_at_(free_at), mapped_(mapped), name_(std::move(name)) {}

std::shared_ptr<SharedLink> SharedLink::local() {
  return std::shared_ptr<SharedLink>(new SharedLink(new std::atomic<std::int64_t>(0), nullptr, ""));
}

Result<std::shared_ptr<SharedLink>> SharedLink::open(const std::string& name) {
  auto fail = [&](const char* what) {
    return failure(ErrorKind::internal, std::string("emulated link ") + name + ": " + what + ": " + std::strerror(errno));
  };
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) return fail("shm_open");
  // A new object is zero-filled: the link is free since the clock's epoch.
  if (::ftruncate(fd, sizeof(std::atomic<std::int64_t>)) != 0) {
    ::close(fd);
    return fail("ftruncate");
  }
  void* p = ::mmap(nullptr, sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return fail("mmap");
  return std::shared_ptr<SharedLink>(new SharedLink(static_cast<std::atomic<std::int64_t>*>(p), p, name));
}

SharedLink::~SharedLink() {
  if (mapped_ == nullptr) {
    delete free_at_;
    return;
  }
  ::munmap(mapped_, sizeof(std::atomic<std::int64_t>));
  ::shm_unlink(name_.c_str());  // ENOENT when another sharer removed it first
}

SharedLink::Clock::time_point SharedLink::reserve(Clock::time_point queued, Clock::duration busy) {
  std::int64_t free = free_at_->load(std::memory_order_relaxed), end = 0;
  do {
    end = std::max<std::int64_t>(free, queued.time_since_epoch().count()) + busy.count();
  } while (!free_at_->compare_exchange_weak(free, end, std::memory_order_acq_rel, std::memory_order_relaxed));
  return Clock::time_point(Clock::duration(end));
}

}  // namespace het::transport
