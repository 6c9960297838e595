#include "transport/tcp.hpp"

#include "clock/clock.hpp"
#include "input/address.hpp"

#include <zlib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <limits>

namespace het::transport {

namespace {

constexpr std::uint32_t kMagic = 0x48455458;  // "HETX"
struct Header {
  std::uint32_t magic, tag;
  std::uint64_t length;
  std::uint32_t crc;
  // A shaped frame: when the emulated link delivers it, as the sender's steady clock reads
  // (nanoseconds; for a receiver on the same machine, whose clock that is), and how long after
  // the write that is (microseconds; for one on another machine, which holds it that long after
  // reading it). 0 and 0: unshaped.
  std::uint32_t hold_us;
  std::uint64_t due_ns;
};
static_assert(sizeof(Header) == 32);

std::string sys(const std::string& what) { return what + ": " + std::strerror(errno); }
Diagnostic lost(std::string what) { return failure(ErrorKind::peer_lost, std::move(what)); }
Diagnostic ours(std::string what) { return failure(ErrorKind::internal, std::move(what)); }

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= std::size_t(w);
  }
  return true;
}

// Reads exactly n bytes, waiting at most timeout_s for each chunk. A peer that closes, resets
// or stays silent is lost (peer_lost: the consequence of its failure, not a cause here).
Result<Done> read_all(int fd, char* p, std::size_t n, double timeout_s, int peer) {
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(timeout_s * 1000));
    if (r == 0) return lost("no data from rank " + std::to_string(peer) + " for " + std::to_string(int(timeout_s)) + " s");
    if (r < 0) {
      if (errno == EINTR) continue;
      return ours(sys("poll"));
    }
    ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) return lost("rank " + std::to_string(peer) + " closed the connection");
    if (got < 0) {
      if (errno == EINTR) continue;
      return lost(sys("recv from rank " + std::to_string(peer)));
    }
    p += got, n -= std::size_t(got);
  }
  return Done{};
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t n) {
  // zlib's CRC-32 (the IEEE polynomial), in pieces that fit its uInt length.
  uLong c = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  for (std::size_t done = 0; done < n;) {
    const std::size_t piece = std::min<std::size_t>(n - done, std::size_t(1) << 30);
    c = ::crc32(c, p + done, uInt(piece));
    done += piece;
  }
  return std::uint32_t(c);
}

namespace {

// "host:port" → an IPv4 address; false when the text is not one.
bool parse_endpoint(const std::string& text, sockaddr_in& to) {
  auto endpoint = input::parse_host_port(text, "endpoint");
  if (!endpoint) return false;
  to = sockaddr_in{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(endpoint->port));
  return ::inet_pton(AF_INET, endpoint->host.c_str(), &to.sin_addr) == 1;
}

std::string endpoint_key(int rank) { return "rank-" + std::to_string(rank) + ".endpoint"; }

}  // namespace

Result<std::unique_ptr<Peers>> Peers::connect(int rank, int world, rendezvous::Rendezvous& rendezvous, double timeout_s,
                                             const std::string& host) {
  // Errors are ours (internal) but where a peer did not show up or answer (peer_lost) and
  // where the rendezvous refused (its kind: a wrong token is invalid input).
  auto fail = [&](std::string what, ErrorKind kind = ErrorKind::internal) {
    return failure(kind, std::move(what), "rank " + std::to_string(rank));
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto seconds_left = [&] { return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count(); };
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return fail(sys("socket"));
  struct CloseListener {
    int fd;
    ~CloseListener() { ::close(fd); }
  } close_listener{listener};
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return fail("'" + host + "' is not an IPv4 address", ErrorKind::invalid_input);
  addr.sin_port = 0;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(listener, world) < 0)
    return fail(sys("bind/listen"));
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  if (auto published = rendezvous.publish(endpoint_key(rank), host + ":" + std::to_string(ntohs(addr.sin_port)));
      !published)
    return fail("cannot publish this rank's endpoint: " + to_string(published.errors()), published.errors().front().kind);
  // The connections made so far; closed when connecting fails part way.
  struct Connections {
    std::vector<int> fds;
    ~Connections() {
      for (int fd : fds)
        if (fd >= 0) ::close(fd);
    }
  } made{std::vector<int>(std::size_t(world), -1)};
  // Connect to every lower rank, announcing ourselves.
  for (int peer = 0; peer < rank; ++peer) {
    auto endpoint = rendezvous.wait(endpoint_key(peer), std::max(0.0, seconds_left()));
    if (!endpoint) return fail("rank " + std::to_string(peer) + "'s endpoint: " + to_string(endpoint.errors()), endpoint.errors().front().kind);
    sockaddr_in to{};
    if (!parse_endpoint(*endpoint, to))
      return fail("rank " + std::to_string(peer) + " published '" + *endpoint + "', not an IPv4 host:port");
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return fail(sys("socket"));
    made.fds[std::size_t(peer)] = fd;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0)
      return fail(sys("connect to rank " + std::to_string(peer) + " at " + *endpoint), ErrorKind::peer_lost);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::int32_t me = rank;
    if (!write_all(fd, reinterpret_cast<const char*>(&me), sizeof me)) return fail(sys("handshake"), ErrorKind::peer_lost);
  }
  // Accept every higher rank.
  for (int k = rank + 1; k < world; ++k) {
    pollfd pfd{listener, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0)
      return fail("timed out waiting for higher ranks to connect", ErrorKind::peer_lost);
    int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return fail(sys("accept"));
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::int32_t who = -1;
    auto read = read_all(fd, reinterpret_cast<char*>(&who), sizeof who, timeout_s, -1);
    if (!read || who <= rank || who >= world || made.fds[std::size_t(who)] >= 0) {
      ::close(fd);
      return fail("bad handshake from a connecting peer");
    }
    made.fds[std::size_t(who)] = fd;
  }
  std::vector<int> fds = std::move(made.fds);
  made.fds.clear();
  return std::unique_ptr<Peers>(new Peers(rank, world, std::move(fds), timeout_s));
}

struct Peers::Link {
  int peer = -1, fd = -1;
  // Sending: frames queued by send(), written by `thread`.
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::vector<char>>> queue;  // (queued at, frame)
  bool stop = false, busy = false;
  std::optional<Diagnostic> error;    // the first write that failed
  double bandwidth = 0, latency = 0;    // shaping; 0: none
  std::shared_ptr<SharedLink> shared;   // the link it shares with other connections, or null
  std::thread thread;
  // Both ends have one IPv4 address: one machine, one steady clock (shaped frames' due times).
  bool same_clock = false;
  // Receiving: frames read ahead by `reader` as they arrive, taken by recv(); after the last
  // frame, why no more come (closed, corrupt); both under in_mutex.
  std::mutex in_mutex;
  std::condition_variable in_cv;
  struct Frame {
    std::uint32_t tag;
    std::vector<char> payload;
    std::chrono::steady_clock::time_point due;  // when the emulated link delivers it
  };
  std::deque<Frame> inbox;
  std::optional<Diagnostic> in_error;
  std::atomic<bool> in_stop{false};
  std::thread reader;
};

Peers::Peers(int rank, int world, std::vector<int> fds, double timeout_s)
    : rank_(rank), world_(world), timeout_s_(timeout_s), links_(fds.size()) {
  for (std::size_t p = 0; p < fds.size(); ++p) {
    if (fds[p] < 0) continue;
    links_[p] = std::make_unique<Link>();
    Link& l = *links_[p];
    l.peer = int(p), l.fd = fds[p];
    sockaddr_in self{}, other{};
    socklen_t a = sizeof self, b = sizeof other;
    l.same_clock = ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&self), &a) == 0 &&
                   ::getpeername(l.fd, reinterpret_cast<sockaddr*>(&other), &b) == 0 && self.sin_addr.s_addr == other.sin_addr.s_addr;
    l.thread = std::thread([this, &l] { sender_loop(l); });
    l.reader = std::thread([&l] { reader_loop(l); });
  }
}

Peers::~Peers() {
  flush();
  for (auto& l : links_) {
    if (!l) continue;
    {
      std::lock_guard<std::mutex> lock(l->mutex);
      l->stop = true;
    }
    l->cv.notify_all();
    l->thread.join();
    l->in_stop = true;
    ::shutdown(l->fd, SHUT_RDWR);  // wakes a reader in the middle of a frame
    l->reader.join();
    ::close(l->fd);
  }
}

// Reads frames from the peer as they arrive, so that a transfer proceeds while this rank
// computes (the receiver's side of the overlap; send() is the sender's). Waits for the start
// of a frame as long as it takes (idle links are normal); the body of a frame must keep coming.
void Peers::reader_loop(Link& l) {
  auto fail = [&](Diagnostic why) {
    std::lock_guard<std::mutex> lock(l.in_mutex);
    l.in_error = std::move(why);
    l.in_cv.notify_all();
  };
  while (!l.in_stop) {
    pollfd pfd{l.fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, 100);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    if (r < 0) return fail(ours(sys("poll")));
    Header h{};
    if (auto read = read_all(l.fd, reinterpret_cast<char*>(&h), sizeof h, 3600, l.peer); !read) return fail(read.errors().front());
    if (h.magic != kMagic) return fail(ours("garbage from rank " + std::to_string(l.peer) + " (not a hetexec frame)"));
    if (h.length > (std::uint64_t(1) << 40))
      return fail(ours("rank " + std::to_string(l.peer) + " announced a frame of " + std::to_string(h.length) + " bytes"));
    Link::Frame f{h.tag, std::vector<char>(h.length), {}};
    if (auto read = read_all(l.fd, f.payload.data(), f.payload.size(), 3600, l.peer); !read) return fail(read.errors().front());
    if (h.due_ns != 0)
      f.due = l.same_clock ? std::chrono::steady_clock::time_point(
                                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(h.due_ns)))
                           : std::chrono::steady_clock::now() + std::chrono::microseconds(h.hold_us);
    if (crc32(f.payload.data(), f.payload.size()) != h.crc)
      return fail(ours("corrupt message from rank " + std::to_string(l.peer) + " (CRC-32 mismatch)"));
    std::lock_guard<std::mutex> lock(l.in_mutex);
    l.inbox.push_back(std::move(f));
    l.in_cv.notify_all();
  }
}

void Peers::shape(int peer, double bandwidth, double latency, std::shared_ptr<SharedLink> shared) {
  Link& l = *links_[std::size_t(peer)];
  std::lock_guard<std::mutex> lock(l.mutex);
  l.bandwidth = bandwidth, l.latency = latency, l.shared = std::move(shared);
}

void Peers::send(int peer, std::uint32_t tag, const void* data, std::size_t bytes) {
  // The frame's CRC is taken by the sender thread (the caller only copies the payload).
  std::vector<char> f(sizeof(Header) + bytes);
  Header h{kMagic, tag, bytes, 0, 0, 0};
  std::memcpy(f.data(), &h, sizeof h);
  if (bytes) std::memcpy(f.data() + sizeof h, data, bytes);
  Link& l = *links_[std::size_t(peer)];
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    l.queue.emplace_back(std::chrono::steady_clock::now(), std::move(f));
  }
  l.cv.notify_all();
  std::lock_guard<std::mutex> lock(count_mutex_);
  counts_[tag].sent += bytes;
}

Peers::Count Peers::count(std::uint32_t tag) const {
  std::lock_guard<std::mutex> lock(count_mutex_);
  auto it = counts_.find(tag);
  return it == counts_.end() ? Count{} : it->second;
}

void Peers::sender_loop(Link& l) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point link_free = Clock::now();
  std::unique_lock<std::mutex> lock(l.mutex);
  while (true) {
    l.cv.wait(lock, [&] { return l.stop || !l.queue.empty(); });
    if (l.queue.empty()) return;
    const auto queued = l.queue.front().first;
    std::vector<char> f = std::move(l.queue.front().second);
    l.queue.pop_front();
    l.busy = true;
    const double bandwidth = l.bandwidth, latency = l.latency;
    SharedLink* shared = l.shared.get();
    lock.unlock();
    Header h;
    std::memcpy(&h, f.data(), sizeof h);
    h.crc = crc32(f.data() + sizeof h, f.size() - sizeof h);
    if (bandwidth > 0) {
      // The frame enters the link when it was queued or when the link has carried the frames
      // before it (this connection's, or every connection's sharing the link), occupies it for
      // bytes/bandwidth, and arrives `latency` later; frames in flight overlap their latencies
      // as on a wire. It is written now; the receiver holds it for what is left of that.
      const auto busy = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(double(f.size()) / bandwidth));
      link_free = shared != nullptr ? shared->reserve(queued, busy) : std::max(queued, link_free) + busy;
      const auto due = link_free + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(latency));
      const double hold_us = std::chrono::duration<double, std::micro>(due - Clock::now()).count();
      h.hold_us = hold_us <= 0 ? 0 : hold_us >= 4e9 ? std::numeric_limits<std::uint32_t>::max() : std::uint32_t(std::lround(hold_us));
      h.due_ns = std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count());
    }
    std::memcpy(f.data(), &h, sizeof h);
    const bool ok = write_all(l.fd, f.data(), f.size());
    lock.lock();
    l.busy = false;
    if (!ok && !l.error) l.error = lost(sys("send to rank " + std::to_string(l.peer)));
    l.cv.notify_all();
  }
}

Result<Done> Peers::flush() {
  for (auto& l : links_) {
    if (!l) continue;
    std::unique_lock<std::mutex> lock(l->mutex);
    l->cv.wait(lock, [&] { return (l->queue.empty() && !l->busy) || l->stop; });
    if (l->error) return *l->error;
  }
  return Done{};
}

Result<Done> Peers::recv(int peer, std::uint32_t tag, void* data, std::size_t bytes) {
  Link& l = *links_[std::size_t(peer)];
  std::unique_lock<std::mutex> lock(l.in_mutex);
  const bool arrived = l.in_cv.wait_for(lock, std::chrono::duration<double>(timeout_s_),
                                        [&] { return !l.inbox.empty() || l.in_error; });
  if (l.inbox.empty()) {  // frames that came before an error are still delivered
    if (!arrived) return lost("no data from rank " + std::to_string(peer) + " for " + std::to_string(int(timeout_s_)) + " s");
    return *l.in_error;
  }
  Link::Frame f = std::move(l.inbox.front());
  l.inbox.pop_front();
  lock.unlock();
  if (f.payload.size() != bytes || f.tag != tag)
    return ours("rank " + std::to_string(peer) + " sent tag " + std::to_string(f.tag) + " of " + std::to_string(f.payload.size()) +
                " bytes; expected tag " + std::to_string(tag) + " of " + std::to_string(bytes));
  clock::sleep_until(f.due);  // a shaped frame: until the emulated link delivers it
  if (bytes) std::memcpy(data, f.payload.data(), bytes);
  std::lock_guard<std::mutex> count_lock(count_mutex_);
  counts_[tag].received += bytes;
  return Done{};
}

namespace {
struct Ring {
  int p, me, right, left;
  std::size_t n;
  Ring(const Peers& peers, const std::vector<int>& group, std::size_t count) : n(count) {
    p = static_cast<int>(group.size());
    me = static_cast<int>(std::find(group.begin(), group.end(), peers.rank()) - group.begin());
    right = group[std::size_t((me + 1) % p)];
    left = group[std::size_t((me + p - 1) % p)];
  }
  std::pair<std::size_t, std::size_t> chunk(int c) const {  // (offset, size)
    c = ((c % p) + p) % p;
    const std::size_t lo = n * std::size_t(c) / std::size_t(p), hi = n * std::size_t(c + 1) / std::size_t(p);
    return {lo, hi - lo};
  }
};
}  // namespace

int owned_chunk(const std::vector<int>& group, int rank) {
  const int p = static_cast<int>(group.size());
  const int me = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
  return (me + 1) % p;
}

template <class T>
Result<Done> reduce_scatter_sum(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag) {
  if (group.size() <= 1 || n == 0) return Done{};
  const Ring ring(peers, group, n);
  std::vector<T> buf(n / std::size_t(ring.p) + 1);
  // After p-1 steps member `me` holds the full sum of chunk me+1.
  for (int s = 0; s < ring.p - 1; ++s) {
    auto [so, sn] = ring.chunk(ring.me - s);
    auto [ro, rn] = ring.chunk(ring.me - s - 1);
    peers.send(ring.right, tag, data + so, sn * sizeof(T));
    if (auto got = peers.recv(ring.left, tag, buf.data(), rn * sizeof(T)); !got) return got;
    for (std::size_t i = 0; i < rn; ++i) data[ro + i] += buf[i];
  }
  return Done{};
}

template <class T>
Result<Done> all_gather(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag) {
  if (group.size() <= 1 || n == 0) return Done{};
  const Ring ring(peers, group, n);
  for (int s = 0; s < ring.p - 1; ++s) {
    auto [so, sn] = ring.chunk(ring.me + 1 - s);
    auto [ro, rn] = ring.chunk(ring.me - s);
    peers.send(ring.right, tag, data + so, sn * sizeof(T));
    if (auto got = peers.recv(ring.left, tag, data + ro, rn * sizeof(T)); !got) return got;
  }
  return Done{};
}

template <class T>
Result<Done> all_reduce_sum(Peers& peers, const std::vector<int>& group, T* data, std::size_t n, std::uint32_t tag) {
  if (auto got = reduce_scatter_sum(peers, group, data, n, tag); !got) return got;
  return all_gather(peers, group, data, n, tag);
}

template <class T>
Result<Done> broadcast(Peers& peers, const std::vector<int>& group, int root, T* data, std::size_t n, std::uint32_t tag) {
  if (group.size() <= 1 || n == 0) return Done{};
  const Ring ring(peers, group, n);
  const int r = static_cast<int>(std::find(group.begin(), group.end(), root) - group.begin());
  const int from_root = (ring.me - r + ring.p) % ring.p;  // hops from the root along the ring
  if (from_root != 0)
    if (auto got = peers.recv(ring.left, tag, data, n * sizeof(T)); !got) return got;
  if (from_root != ring.p - 1) peers.send(ring.right, tag, data, n * sizeof(T));
  return Done{};
}

#define HET_COLLECTIVES(T)                                                                                          \
  template Result<Done> reduce_scatter_sum<T>(Peers&, const std::vector<int>&, T*, std::size_t, std::uint32_t);      \
  template Result<Done> all_gather<T>(Peers&, const std::vector<int>&, T*, std::size_t, std::uint32_t);              \
  template Result<Done> broadcast<T>(Peers&, const std::vector<int>&, int, T*, std::size_t, std::uint32_t);
HET_COLLECTIVES(float)
HET_COLLECTIVES(double)

template Result<Done> all_reduce_sum<float>(Peers&, const std::vector<int>&, float*, std::size_t, std::uint32_t);
template Result<Done> all_reduce_sum<double>(Peers&, const std::vector<int>&, double*, std::size_t, std::uint32_t);

}  // namespace het::transport
