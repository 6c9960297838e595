#pragma once
// NCCL communicators for the groups of a job (DESIGN.md §9): a tensor-parallel group, a
// data-parallel group, a pair of pipeline neighbours. Built only with HET_HAVE_NCCL. The contract:
// - Communicator::create makes the communicator of one group from its rank list (job ranks,
//   in the order that defines member indices). The group's first rank creates the
//   ncclUniqueId and publishes it, hex-encoded, under the rendezvous key nccl-<group>-uid;
//   the others wait for it. Group names are unique within a job ([A-Za-z0-9._-]).
// - Every operation runs on device memory on the given stream and returns once it finished,
//   or with an error after timeout_s: the communicator is non-blocking and polled with
//   ncclCommGetAsyncError, so a dead peer gives an error value (and the communicator is
//   aborted and unusable), never a hang.
// - Collectives sum (reduce-scatter, all-reduce) or concatenate (all-gather) in member order:
//   reduce-scatter leaves member i with block i of the sum; all-gather puts member i's block
//   at i·count. exchange() runs several ncclSend/ncclRecv in one ncclGroupStart/End, so
//   sends and receives between pipeline neighbours cannot deadlock.
// - Errors are values with sentences naming the group and the operation.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "diag/diag.hpp"
#include "rendezvous/rendezvous.hpp"

struct ncclComm;

namespace het::transport::nccl {

enum class DataType { f32, bf16 };

struct P2P {
  enum Kind { send, recv } kind;
  int peer;     // the peer's member index in this group
  void* data;   // device memory
  std::size_t count;
};

std::string uid_key(const std::string& group);  // "nccl-<group>-uid"

class Communicator {
 public:
  // This process is job rank `rank` (one of `ranks`) on CUDA device `device`.
  static Result<std::unique_ptr<Communicator>> create(const std::string& group, const std::vector<int>& ranks, int rank,
                                                      int device, rendezvous::Rendezvous& rendezvous, double timeout_s);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& group() const { return group_; }
  int size() const { return size_; }
  int member() const { return member_; }  // this rank's index in the group

  // data[count] summed over the members, in place.
  Result<Done> all_reduce_sum(void* data, std::size_t count, DataType type, cudaStream_t stream);
  // recv[count] = block member() of the sum of every member's send[size()·count].
  Result<Done> reduce_scatter_sum(const void* send, void* recv, std::size_t count, DataType type, cudaStream_t stream);
  // recv[size()·count] = every member's send[count], in member order.
  Result<Done> all_gather(const void* send, void* recv, std::size_t count, DataType type, cudaStream_t stream);
  // Point-to-point sends and receives, together; with wait = false it returns once they are
  // enqueued on `stream` (wait(stream) then waits for them).
  Result<Done> exchange(const std::vector<P2P>& ops, DataType type, cudaStream_t stream, bool wait = true);
  // Returns once everything enqueued on `stream` is done (or the error, after timeout_s).
  Result<Done> wait(cudaStream_t stream) { return finish("waiting for the operations enqueued", stream); }

 private:
  Communicator() = default;
  // Refuses an aborted communicator, else makes the NCCL call(s), settles them and waits for
  // the stream: every operation's steps.
  template <class Call>
  Result<Done> run(const std::string& what, Call&& call, cudaStream_t stream, bool wait = true);
  Result<Done> settle(const std::string& what, int result);  // waits out ncclInProgress
  std::string describe(int result) const;  // NCCL's sentence for a result, and its last error
  Result<Done> finish(const std::string& what, cudaStream_t stream);  // waits for the stream
  Diagnostic fail(const std::string& what, const std::string& why, ErrorKind kind);  // aborts the communicator

  std::string group_;
  int size_ = 0, member_ = 0;
  double timeout_s_ = 0;
  ncclComm* comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace het::transport::nccl
