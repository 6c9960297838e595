// Emulation of <nccl.h> for tests/cuda_emulation: the NCCL calls libexec/transport/nccl.cpp and
// node/cuda.cpp make, between the processes (or threads) of one machine over loopback TCP, with
// NCCL's semantics as its documentation states them, so that a hetexec built against the
// emulation (cmake -DHET_CUDA=EMULATION) runs the whole multi-rank GPU path on CPUs:
//  * ncclGetUniqueId starts a bootstrap root in the calling process (a thread, as NCCL's does)
//    and puts its port in the id; every member, the first included, connects to it with its own
//    address, gets everyone's, and connects to every other member (a full mesh; each connection
//    has a reader thread that takes frames off it as they come, so sends never wait for receives).
//  * A communicator runs its operations in enqueue order on a thread of its own, off the
//    caller's (as a device runs NCCL's kernels); each one is pending work of its stream
//    (emulation.hpp): cudaStreamQuery says not ready, and later work on the stream waits for it.
//    Stream order holds before it too: an operation starts once the stream's earlier work is done.
//  * Non-blocking communicators (config.blocking = 0): initialisation returns ncclInProgress and
//    goes on on the communicator's thread; ncclCommGetAsyncError reports ncclInProgress until it
//    is done, then ncclSuccess, or the error that stopped the communicator. A lost member
//    (connection closed) is ncclRemoteError; a mismatched operation (another collective or size
//    on the other side) ncclInvalidUsage. A failed operation never completes on its stream —
//    as on a device, the stream hangs — until ncclCommAbort, which closes every connection,
//    stops the threads and completes what was pending.
//  * Sums are taken in member order, in fp32 for bf16 (rounded once), so every member gets the
//    same bits. Only ncclSum and the types fp32 and bf16 (what the runtime uses); anything else
//    is ncclInvalidArgument.
//  * ncclGroupStart/End (per thread) gather operations and enqueue them per communicator as one:
//    its sends first, then its collectives, then its receives, so neighbours that send to each
//    other in one group cannot deadlock.
// What it does not show: NCCL's algorithms (rings, trees) and their rounding, speed, or the
// transports between nodes.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime_api.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE 22800

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
typedef struct { int blocking; } ncclConfig_t;  // the one field the emulation reads
#define NCCL_CONFIG_INITIALIZER {1}

namespace emu::nccl {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[16] = "het-emu-nccl-v1";  // the id's first bytes
constexpr double kBootstrapSeconds = 600;       // how long a bootstrap root waits for its members

struct Id {  // what an ncclUniqueId holds here
  char magic[16];
  std::uint16_t port;   // the bootstrap root's, on 127.0.0.1
  std::uint64_t nonce;  // this id's, so a member never joins another job's root on a reused port
};
static_assert(sizeof(Id) <= NCCL_UNIQUE_ID_BYTES);

inline bool write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= std::size_t(k);
  }
  return true;
}
inline bool read_all(int fd, void* p, std::size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k, n -= std::size_t(k);
  }
  return true;
}
// Waits until fd is readable (or has an incoming connection): false when `stop` was raised or
// `deadline` passed first.
inline bool wait_readable(int fd, const std::atomic<bool>& stop, Clock::time_point deadline) {
  while (!stop.load() && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
  return false;
}
inline int listen_local(std::uint16_t* port) {  // a socket listening on 127.0.0.1, any port
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}
inline int connect_local(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// The bootstrap root: takes each member's (nonce, nranks, rank, port), and once all nranks are
// in, sends every member all ports in rank order. A member that brings another nonce, or a rank
// out of range or twice, is turned away (its connection closed).
inline void bootstrap_root(int listener, std::uint64_t nonce) {
  struct Hello {
    std::uint64_t nonce;
    std::int32_t nranks, rank;
    std::uint16_t port;
  };
  const std::atomic<bool> never{false};
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kBootstrapSeconds));
  std::vector<int> fds;
  std::vector<std::uint16_t> ports;
  int n = -1, joined = 0;
  while (n < 0 || joined < n) {
    if (!wait_readable(listener, never, deadline)) break;
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello h{};
    const bool ok = read_all(fd, &h, sizeof h) && h.nonce == nonce && h.nranks > 0 && (n < 0 || h.nranks == n) && h.rank >= 0 &&
                    h.rank < h.nranks && (n < 0 || fds[std::size_t(h.rank)] < 0);
    if (!ok) {
      ::close(fd);
      continue;
    }
    if (n < 0) n = h.nranks, fds.assign(std::size_t(n), -1), ports.assign(std::size_t(n), 0);
    fds[std::size_t(h.rank)] = fd, ports[std::size_t(h.rank)] = h.port, ++joined;
  }
  if (n > 0 && joined == n)
    for (int fd : fds) write_all(fd, ports.data(), ports.size() * sizeof ports[0]);
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  ::close(listener);
}

struct Frame {
  std::uint32_t op;  // what the sender was doing (Op)
  std::vector<char> data;
};
enum Op : std::uint32_t { kAllReduce = 1, kReduceScatter = 2, kAllGather = 3, kSendRecv = 4 };
inline const char* op_name(std::uint32_t op) {
  switch (op) {
    case kAllReduce: return "an all-reduce";
    case kReduceScatter: return "a reduce-scatter";
    case kAllGather: return "an all-gather";
    case kSendRecv: return "a send";
  }
  return "an unknown operation";
}

// A connection to another member; its reader thread queues the frames that arrive.
struct Link {
  int fd = -1;
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Frame> inbox;
  bool closed = false;
  std::thread reader;
  void read_frames() {
    for (;;) {
      std::uint64_t head[2];  // op, bytes
      Frame f;
      bool ok = read_all(fd, head, sizeof head);
      if (ok) {
        f.op = std::uint32_t(head[0]), f.data.resize(head[1]);
        ok = read_all(fd, f.data.data(), f.data.size());
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (!ok) {
        closed = true;
        arrived.notify_all();
        return;
      }
      inbox.push_back(std::move(f));
      arrived.notify_all();
    }
  }
};

struct P2P {
  bool send;
  void* data;
  std::size_t bytes;
  int peer;
};

inline std::size_t type_bytes(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : 4; }
inline float load(const char* p, std::size_t i, ncclDataType_t t) {
  if (t == ncclFloat32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  __nv_bfloat16 b;
  std::memcpy(&b, p + 2 * i, 2);
  return __bfloat162float(b);
}
inline void store(char* p, std::size_t i, float v, ncclDataType_t t) {
  if (t == ncclFloat32) {
    std::memcpy(p + 4 * i, &v, 4);
    return;
  }
  const __nv_bfloat16 b = __float2bfloat16(v);
  std::memcpy(p + 2 * i, &b, 2);
}

// out[count] = the parts summed element by element in member order (in fp32; every member
// gets the same bits).
inline void sum_into(char* out, const std::vector<std::vector<char>>& parts, std::size_t count, ncclDataType_t t) {
  for (std::size_t i = 0; i < count; ++i) {
    float sum = load(parts[0].data(), i, t);
    for (std::size_t j = 1; j < parts.size(); ++j) sum += load(parts[j].data(), i, t);
    store(out, i, sum, t);
  }
}

}  // namespace emu::nccl

struct ncclComm {
  struct Task {
    std::function<ncclResult_t()> run;
    std::vector<std::shared_future<void>> after;  // the streams' earlier work
    std::promise<void> done;
  };

  int n = 0, me = 0;
  bool blocking = true;
  emu::nccl::Id id{};
  std::vector<std::unique_ptr<emu::nccl::Link>> links;  // [member]; null for this member
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Task> tasks;
  std::vector<std::promise<void>> stalled;  // operations that failed: completed by abort or destroy
  ncclResult_t state = ncclInProgress;       // ncclCommGetAsyncError's answer
  bool running = false;                      // a task is on the worker now
  std::string last_error;
  std::thread worker;

  ncclResult_t fail(ncclResult_t r, std::string why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (state == ncclSuccess || state == ncclInProgress) state = r, last_error = std::move(why);
    return r;
  }

  // Enqueues `run` after the work already on `streams`; its completion becomes their pending work.
  void enqueue(std::function<ncclResult_t()> run, const std::vector<emu::Stream*>& streams) {
    Task t;
    t.run = std::move(run);
    for (emu::Stream* s : streams)
      for (auto& f : s->snapshot()) t.after.push_back(f);
    std::shared_future<void> done = t.done.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mutex);
      tasks.push_back(std::move(t));
    }
    for (emu::Stream* s : streams) s->enqueue(done);
    wake.notify_all();
  }

  void work() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop.load() || !tasks.empty(); });
        if (stop.load()) return;
        t = std::move(tasks.front());
        tasks.pop_front();
        running = true;
      }
      for (auto& f : t.after)
        while (!stop.load() && f.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
        }
      bool ok = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        ok = state == ncclSuccess || state == ncclInProgress;  // a stopped communicator runs nothing more
      }
      if (ok && !stop.load()) ok = t.run() == ncclSuccess;
      std::lock_guard<std::mutex> lock(mutex);
      running = false;
      if (ok) t.done.set_value();
      else stalled.push_back(std::move(t.done));
      wake.notify_all();
    }
  }

  // Frames to and from member j.
  ncclResult_t send(int j, std::uint32_t op, const void* data, std::size_t bytes) {
    const std::uint64_t head[2] = {op, bytes};
    const int fd = links[std::size_t(j)]->fd;
    if (!emu::nccl::write_all(fd, head, sizeof head) || !emu::nccl::write_all(fd, data, bytes))
      return fail(ncclRemoteError, "the connection to member " + std::to_string(j) + " is closed (did it fail or leave?)");
    return ncclSuccess;
  }
  ncclResult_t receive(int j, std::uint32_t op, std::size_t bytes, std::vector<char>* out) {
    emu::nccl::Link& l = *links[std::size_t(j)];
    std::unique_lock<std::mutex> lock(l.mutex);
    l.arrived.wait(lock, [&] { return stop.load() || l.closed || !l.inbox.empty(); });
    if (l.inbox.empty()) {
      lock.unlock();
      return fail(ncclRemoteError, "member " + std::to_string(j) + " closed its connection (did it fail or leave?)");
    }
    emu::nccl::Frame f = std::move(l.inbox.front());
    l.inbox.pop_front();
    lock.unlock();
    if (f.op != op || f.data.size() != bytes)
      return fail(ncclInvalidUsage, std::string("member ") + std::to_string(j) + " sent " + emu::nccl::op_name(f.op) + " of " +
                                        std::to_string(f.data.size()) + " bytes where this member expected " +
                                        emu::nccl::op_name(op) + " of " + std::to_string(bytes));
    *out = std::move(f.data);
    return ncclSuccess;
  }

  // One collective's traffic in the mesh: sends block_of(j) [bytes] to every other member j, and
  // returns in (*parts)[j] what member j sent this one (this member's own: block_of(me)).
  // Every part is copied before anything is written back, so a block may lie in the output.
  ncclResult_t exchange(std::uint32_t op, const std::function<const char*(int)>& block_of, std::size_t bytes,
                        std::vector<std::vector<char>>* parts) {
    parts->assign(std::size_t(n), {});
    const char* mine = block_of(me);
    (*parts)[std::size_t(me)].assign(mine, mine + bytes);
    for (int j = 0; j < n; ++j)
      if (j != me)
        if (ncclResult_t r = send(j, op, block_of(j), bytes); r != ncclSuccess) return r;
    for (int j = 0; j < n; ++j)
      if (j != me)
        if (ncclResult_t r = receive(j, op, bytes, &(*parts)[std::size_t(j)]); r != ncclSuccess) return r;
    return ncclSuccess;
  }

  // The bootstrap and the mesh (on the worker): see the header's comment.
  ncclResult_t connect_all() {
    using namespace emu::nccl;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kBootstrapSeconds));
    std::uint16_t my_port = 0;
    const int listener = listen_local(&my_port);
    if (listener < 0) return fail(ncclSystemError, std::string("cannot listen on 127.0.0.1: ") + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{listener};
    const int root = connect_local(id.port);
    if (root < 0)
      return fail(ncclSystemError, "no bootstrap root at 127.0.0.1:" + std::to_string(id.port) + " (" + std::strerror(errno) +
                                       "): did the process that made the unique id end?");
    struct {
      std::uint64_t nonce;
      std::int32_t nranks, rank;
      std::uint16_t port;
    } hello{id.nonce, n, me, my_port};
    std::vector<std::uint16_t> ports(std::size_t(n), 0);
    const bool told = write_all(root, &hello, sizeof hello) && wait_readable(root, stop, deadline) &&
                      read_all(root, ports.data(), ports.size() * sizeof ports[0]);
    ::close(root);
    if (!told) return fail(ncclSystemError, "the bootstrap root did not send the members' addresses (not every member joined?)");
    links.resize(std::size_t(n));
    for (int j = 0; j < n; ++j)
      if (j != me) links[std::size_t(j)] = std::make_unique<Link>();
    for (int j = 0; j < me; ++j) {  // connect to those before me, say who I am
      const int fd = connect_local(ports[std::size_t(j)]);
      const std::int32_t who = me;
      if (fd < 0 || !write_all(fd, &who, sizeof who)) {
        if (fd >= 0) ::close(fd);
        return fail(ncclSystemError, "cannot connect to member " + std::to_string(j));
      }
      links[std::size_t(j)]->fd = fd;
    }
    for (int k = me + 1; k < n; ++k) {  // those after me connect to me
      if (!wait_readable(listener, stop, deadline)) return fail(ncclSystemError, "a member after this one never connected");
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      std::int32_t who = -1;
      if (fd < 0 || !read_all(fd, &who, sizeof who) || who <= me || who >= n || links[std::size_t(who)]->fd >= 0) {
        if (fd >= 0) ::close(fd);
        return fail(ncclSystemError, "a member connected with a wrong introduction");
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      links[std::size_t(who)]->fd = fd;
    }
    for (auto& l : links)
      if (l) l->reader = std::thread([p = l.get()] { p->read_frames(); });
    std::lock_guard<std::mutex> lock(mutex);
    if (state == ncclInProgress) state = ncclSuccess;
    return ncclSuccess;
  }

  // Stops everything: closes the connections (waking readers and a blocked worker), joins the
  // threads and completes every operation still pending on a stream.
  void shut_down() {
    stop = true;
    for (auto& l : links)
      if (l && l->fd >= 0) ::shutdown(l->fd, SHUT_RDWR);
    for (auto& l : links)
      if (l) {
        std::lock_guard<std::mutex> lock(l->mutex);
        l->arrived.notify_all();
      }
    wake.notify_all();
    if (worker.joinable()) worker.join();
    for (auto& l : links)
      if (l) {
        if (l->reader.joinable()) l->reader.join();
        if (l->fd >= 0) ::close(l->fd);
      }
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& t : tasks) t.done.set_value();
    for (auto& p : stalled) p.set_value();
    tasks.clear(), stalled.clear();
  }
};

namespace emu::nccl {

// What one thread has gathered between ncclGroupStart and ncclGroupEnd, per communicator.
struct Grouped {
  ncclComm* comm;
  std::vector<P2P> p2p;
  std::vector<std::function<ncclResult_t()>> collectives;
  std::vector<emu::Stream*> streams;
};
struct GroupState {
  int depth = 0;
  std::vector<Grouped> pending;
};
inline thread_local GroupState group;

inline Grouped& grouped(ncclComm* c, cudaStream_t s) {
  for (auto& g : group.pending)
    if (g.comm == c) {
      g.streams.push_back(&emu::stream(s));
      return g;
    }
  group.pending.push_back({c, {}, {}, {&emu::stream(s)}});
  return group.pending.back();
}

inline void flush(Grouped g) {  // sends, collectives, receives: one task of its communicator
  ncclComm* c = g.comm;
  auto run = [c, p2p = std::move(g.p2p), collectives = std::move(g.collectives)]() -> ncclResult_t {
    for (const P2P& op : p2p)
      if (op.send)
        if (ncclResult_t r = c->send(op.peer, kSendRecv, op.data, op.bytes); r != ncclSuccess) return r;
    for (const auto& coll : collectives)
      if (ncclResult_t r = coll(); r != ncclSuccess) return r;
    for (const P2P& op : p2p)
      if (!op.send) {
        std::vector<char> got;
        if (ncclResult_t r = c->receive(op.peer, kSendRecv, op.bytes, &got); r != ncclSuccess) return r;
        std::memcpy(op.data, got.data(), got.size());
      }
    return ncclSuccess;
  };
  c->enqueue(run, g.streams);
}

inline ncclResult_t usable(ncclComm* c, ncclDataType_t t, std::size_t count, const void* buffer) {
  if (c == nullptr) return ncclInvalidArgument;
  if (t != ncclFloat32 && t != ncclBfloat16) return c->fail(ncclInvalidArgument, "the emulation sums fp32 and bf16 only");
  if (count > 0 && buffer == nullptr) return c->fail(ncclInvalidArgument, "a null buffer");
  return ncclSuccess;
}

// A collective, alone or in a group.
inline ncclResult_t collective(ncclComm* c, cudaStream_t s, std::function<ncclResult_t()> run) {
  if (group.depth > 0) {
    grouped(c, s).collectives.push_back(std::move(run));
    return ncclSuccess;
  }
  c->enqueue(std::move(run), {&emu::stream(s)});
  return ncclSuccess;
}

}  // namespace emu::nccl

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
inline const char* ncclGetLastError(ncclComm_t c) {
  if (c == nullptr) return "";
  std::lock_guard<std::mutex> lock(c->mutex);
  return c->last_error.c_str();  // valid until the communicator's next failure
}
inline ncclResult_t ncclGetVersion(int* v) { return *v = NCCL_VERSION_CODE, ncclSuccess; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* out) {
  using namespace emu::nccl;
  Id id{};
  std::memcpy(id.magic, kMagic, sizeof id.magic);
  id.nonce = std::random_device{}() * 0x100000000ull + std::random_device{}();
  const int listener = listen_local(&id.port);
  if (listener < 0) return ncclSystemError;
  std::thread(bootstrap_root, listener, id.nonce).detach();  // ends when every member joined, or after kBootstrapSeconds
  std::memset(out->internal, 0, sizeof out->internal);
  std::memcpy(out->internal, &id, sizeof id);
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId uid, int rank, ncclConfig_t* config) {
  using namespace emu::nccl;
  *out = nullptr;
  Id id;
  std::memcpy(&id, uid.internal, sizeof id);
  if (nranks < 1 || rank < 0 || rank >= nranks || std::memcmp(id.magic, kMagic, sizeof id.magic) != 0) return ncclInvalidArgument;
  auto* c = new ncclComm;
  c->n = nranks, c->me = rank, c->id = id, c->blocking = config == nullptr || config->blocking != 0;
  c->worker = std::thread([c] { c->work(); });
  c->enqueue([c] { return c->connect_all(); }, {});
  *out = c;
  if (!c->blocking) return ncclInProgress;
  std::unique_lock<std::mutex> lock(c->mutex);
  c->wake.wait(lock, [&] { return c->state != ncclInProgress; });
  return c->state;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId uid, int rank) {
  return ncclCommInitRankConfig(out, nranks, uid, rank, nullptr);
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
  if (c == nullptr) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(c->mutex);
  *state = c->state;
  return ncclSuccess;
}

// Marks the communicator in progress until every operation enqueued before it has run.
inline ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (c == nullptr) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (c->state != ncclSuccess) return c->state;
    c->state = ncclInProgress;
  }
  c->enqueue([c] {
    std::lock_guard<std::mutex> lock(c->mutex);
    if (c->state == ncclInProgress) c->state = ncclSuccess;
    return ncclSuccess;
  }, {});
  if (!c->blocking) return ncclInProgress;
  std::unique_lock<std::mutex> lock(c->mutex);
  c->wake.wait(lock, [&] { return c->state != ncclInProgress; });
  return c->state;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  {  // what was enqueued runs first (NCCL: destroy after the last operation completed)
    std::unique_lock<std::mutex> lock(c->mutex);
    c->wake.wait(lock, [&] { return (c->tasks.empty() && !c->running) || (c->state != ncclSuccess && c->state != ncclInProgress); });
  }
  c->shut_down();
  delete c;
  return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  c->shut_down();
  delete c;
  return ncclSuccess;
}

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t s) {
  using namespace emu::nccl;
  if (ncclResult_t r = usable(c, t, count, send); r != ncclSuccess) return r;
  if (op != ncclSum) return c->fail(ncclInvalidArgument, "the emulation sums only");
  return collective(c, s, [=]() -> ncclResult_t {
    std::vector<std::vector<char>> parts;
    const auto whole = [&](int) { return static_cast<const char*>(send); };
    if (ncclResult_t r = c->exchange(kAllReduce, whole, count * type_bytes(t), &parts); r != ncclSuccess) return r;
    sum_into(static_cast<char*>(recv), parts, count, t);
    return ncclSuccess;
  });
}

// recv[count] = block `me` of the sum of every member's send[n·count].
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t s) {
  using namespace emu::nccl;
  if (ncclResult_t r = usable(c, t, count, send); r != ncclSuccess) return r;
  if (op != ncclSum) return c->fail(ncclInvalidArgument, "the emulation sums only");
  return collective(c, s, [=]() -> ncclResult_t {
    const std::size_t bytes = count * type_bytes(t);
    std::vector<std::vector<char>> parts;
    const auto block = [&](int j) { return static_cast<const char*>(send) + std::size_t(j) * bytes; };
    if (ncclResult_t r = c->exchange(kReduceScatter, block, bytes, &parts); r != ncclSuccess) return r;
    sum_into(static_cast<char*>(recv), parts, count, t);
    return ncclSuccess;
  });
}

// recv[n·count] = every member's send[count], in member order.
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  using namespace emu::nccl;
  if (ncclResult_t r = usable(c, t, count, send); r != ncclSuccess) return r;
  return collective(c, s, [=]() -> ncclResult_t {
    const std::size_t bytes = count * type_bytes(t);
    std::vector<std::vector<char>> parts;
    const auto whole = [&](int) { return static_cast<const char*>(send); };
    if (ncclResult_t r = c->exchange(kAllGather, whole, bytes, &parts); r != ncclSuccess) return r;
    for (int j = 0; j < c->n; ++j) std::memcpy(static_cast<char*>(recv) + std::size_t(j) * bytes, parts[std::size_t(j)].data(), bytes);
    return ncclSuccess;
  });
}

inline ncclResult_t ncclGroupStart() {
  ++emu::nccl::group.depth;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
  using namespace emu::nccl;
  if (group.depth == 0) return ncclInvalidUsage;
  if (--group.depth > 0) return ncclSuccess;
  std::vector<Grouped> all = std::move(group.pending);
  group.pending.clear();
  for (auto& g : all) flush(std::move(g));
  return ncclSuccess;
}

namespace emu::nccl {
inline ncclResult_t p2p(bool send, void* data, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  if (ncclResult_t r = usable(c, t, count, data); r != ncclSuccess) return r;
  if (peer < 0 || peer >= c->n || peer == c->me) return c->fail(ncclInvalidArgument, "peer " + std::to_string(peer) + " is not another member");
  const bool alone = group.depth == 0;
  if (alone) ncclGroupStart();
  grouped(c, s).p2p.push_back({send, data, count * type_bytes(t), peer});
  if (alone) return ncclGroupEnd();
  return ncclSuccess;
}
}  // namespace emu::nccl

inline ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return emu::nccl::p2p(true, const_cast<void*>(send), count, t, peer, c, s);
}
inline ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return emu::nccl::p2p(false, recv, count, t, peer, c, s);
}
