#include "transport/nccl.hpp"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "transport/hex.hpp"

namespace het::transport::nccl {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DataType type) { return type == DataType::bf16 ? ncclBfloat16 : ncclFloat32; }

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

Diagnostic problem(std::string what) { return failure(ErrorKind::internal, std::move(what)); }

// A remote member's failure or a broken connection (NCCL's socket and remote errors) is a lost
// peer; anything else NCCL reports is ours.
ErrorKind kind_of(ncclResult_t r) { return r == ncclRemoteError || r == ncclSystemError ? ErrorKind::peer_lost : ErrorKind::internal; }

}  // namespace

std::string uid_key(const std::string& group) { return "nccl-" + group + "-uid"; }

Diagnostic Communicator::fail(const std::string& what, const std::string& why, ErrorKind kind) {
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(comm_);  // frees it; later calls on this communicator are refused
    aborted_ = true;
  }
  return failure(kind, "NCCL " + what + " in group '" + group_ + "' (member " + std::to_string(member_) + " of " +
                           std::to_string(size_) + "): " + why);
}

std::string Communicator::describe(int result) const {
  std::string text = ncclGetErrorString(static_cast<ncclResult_t>(result));
  const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

Result<Done> Communicator::settle(const std::string& what, int result) {
  if (result != ncclSuccess && result != ncclInProgress)
    return fail(what, describe(result), kind_of(static_cast<ncclResult_t>(result)));
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) return fail(what, describe(r), kind_of(r));
    if (state == ncclSuccess) return Done{};
    if (state != ncclInProgress) return fail(what, describe(state), kind_of(state));
    if (Clock::now() >= deadline)
      return fail(what, "did not finish within " + seconds(timeout_s_) + " s (is every member alive?); aborted", ErrorKind::peer_lost);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Result<Done> Communicator::finish(const std::string& what, cudaStream_t stream) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    const cudaError_t done = cudaStreamQuery(stream);
    if (done == cudaSuccess) return Done{};
    if (done != cudaErrorNotReady) return fail(what, std::string("CUDA error ") + cudaGetErrorString(done), ErrorKind::internal);
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) return fail(what, describe(state), kind_of(state));
    if (Clock::now() >= deadline)
      return fail(what, "did not finish within " + seconds(timeout_s_) + " s (is every member alive?); aborted", ErrorKind::peer_lost);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Result<std::unique_ptr<Communicator>> Communicator::create(const std::string& group, const std::vector<int>& ranks,
                                                           int rank, int device, rendezvous::Rendezvous& rendezvous,
                                                           double timeout_s) {
  std::unique_ptr<Communicator> c(new Communicator);
  c->group_ = group;
  c->size_ = static_cast<int>(ranks.size());
  c->timeout_s_ = timeout_s;
  const auto me = std::find(ranks.begin(), ranks.end(), rank);
  if (me == ranks.end())
    return problem("NCCL group '" + group + "': rank " + std::to_string(rank) + " is not one of its ranks");
  c->member_ = static_cast<int>(me - ranks.begin());
  if (!rendezvous::valid_key(uid_key(group)))
    return problem("NCCL group name '" + group + "' is not a valid rendezvous key (letters, digits, '.', '_', '-')");
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return problem("NCCL group '" + group + "': cannot use CUDA device " + std::to_string(device) + ": " +
                   cudaGetErrorString(e));

  ncclUniqueId id{};
  if (c->member_ == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return problem("NCCL group '" + group + "': cannot create a unique id: " + ncclGetErrorString(r));
    if (auto done = rendezvous.publish(uid_key(group), to_hex(id.internal, sizeof id.internal)); !done)
      return done.errors();
  } else {
    auto text = rendezvous.wait(uid_key(group), timeout_s);
    if (!text)
      return failure(ErrorKind::peer_lost, "NCCL group '" + group + "': no unique id from its first rank " +
                                               std::to_string(ranks[0]) + ": " + text.errors().front().message);
    auto raw = from_hex(*text);
    if (!raw || raw->size() != sizeof id.internal)
      return problem("NCCL group '" + group + "': the unique id under " + uid_key(group) + " is not " +
                     std::to_string(2 * sizeof id.internal) + " hex digits");
    std::memcpy(id.internal, raw->data(), sizeof id.internal);
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return at once; settle() and finish() poll with a deadline
  const ncclResult_t r = ncclCommInitRankConfig(&c->comm_, c->size_, id, c->member_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    c->comm_ = nullptr;
    return problem("NCCL group '" + group + "': cannot create the communicator: " + ncclGetErrorString(r));
  }
  if (auto done = c->settle("initialisation", r); !done) return done.errors();
  return c;
}

Communicator::~Communicator() {
  if (comm_ == nullptr || aborted_) return;
  // Finalize flushes outstanding work; on a non-blocking communicator it may be in progress.
  const ncclResult_t r = ncclCommFinalize(comm_);
  bool clean = r == ncclSuccess || r == ncclInProgress;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (ncclResult_t state = ncclInProgress; clean && state == ncclInProgress;) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || Clock::now() >= deadline) clean = false;
    if (state != ncclSuccess && state != ncclInProgress) clean = false;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (clean) ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
}

template <class Call>
Result<Done> Communicator::run(const std::string& what, Call&& call, cudaStream_t stream, bool wait) {
  if (aborted_) return problem("NCCL group '" + group_ + "' was aborted after an earlier error");
  if (auto done = settle(what, call()); !done) return done;
  if (!wait) return Done{};
  return finish(what, stream);
}

Result<Done> Communicator::all_reduce_sum(void* data, std::size_t count, DataType type, cudaStream_t stream) {
  return run("all-reduce of " + std::to_string(count) + " elements",
             [&] { return ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm_, stream); }, stream);
}

Result<Done> Communicator::reduce_scatter_sum(const void* send, void* recv, std::size_t count, DataType type,
                                              cudaStream_t stream) {
  return run("reduce-scatter of " + std::to_string(count) + " elements per member",
             [&] { return ncclReduceScatter(send, recv, count, nccl_type(type), ncclSum, comm_, stream); }, stream);
}

Result<Done> Communicator::all_gather(const void* send, void* recv, std::size_t count, DataType type,
                                      cudaStream_t stream) {
  return run("all-gather of " + std::to_string(count) + " elements per member",
             [&] { return ncclAllGather(send, recv, count, nccl_type(type), comm_, stream); }, stream);
}

Result<Done> Communicator::exchange(const std::vector<P2P>& ops, DataType type, cudaStream_t stream, bool wait) {
  const std::string what = "send/receive of " + std::to_string(ops.size()) + " buffers";
  for (const P2P& op : ops)
    if (op.peer < 0 || op.peer >= size_ || op.peer == member_)
      return problem("NCCL " + what + " in group '" + group_ + "': peer " + std::to_string(op.peer) +
                     " is not another member");
  return run(what, [&] {
    ncclResult_t first = ncclGroupStart();
    for (const P2P& op : ops) {
      const ncclResult_t r = op.kind == P2P::send ? ncclSend(op.data, op.count, nccl_type(type), op.peer, comm_, stream)
                                                  : ncclRecv(op.data, op.count, nccl_type(type), op.peer, comm_, stream);
      if (first == ncclSuccess && r != ncclInProgress) first = r;
    }
    const ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
  }, stream, wait);
}

}  // namespace het::transport::nccl
