#include "collective/nccl_group.hpp"

#include <cuda_runtime_api.h>

#include "transport/nccl.hpp"

namespace het::collective {

namespace {

using transport::nccl::Communicator;
using transport::nccl::DataType;

class NcclGroup final : public Group {
 public:
  NcclGroup(std::unique_ptr<Communicator> comm, int ordinal, cudaStream_t stream)
      : comm_(std::move(comm)), ordinal_(ordinal), stream_(stream) {}
  ~NcclGroup() override {
    cudaSetDevice(ordinal_);
    if (device_ != nullptr) cudaFree(device_);
    cudaStreamDestroy(stream_);
  }
  std::string transport() const override { return "nccl"; }

  Range owned(std::size_t n) const override {
    const std::size_t q = block(n), lo = std::min(n, std::size_t(comm_->member()) * q);
    return {lo, std::min(n, lo + q)};
  }

  bool device_memory() const override { return true; }
  std::size_t padded(std::size_t n) const override { return block(n) * std::size_t(comm_->size()); }
  Result<Done> on_device(Op op, float* data, std::size_t n) override {
    if (n == 0) return Done{};
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    float* mine = data + std::size_t(comm_->member()) * block(n);
    switch (op) {
      case Op::all_reduce_sum: return comm_->all_reduce_sum(data, n, DataType::f32, stream_);
      case Op::reduce_scatter_sum: return comm_->reduce_scatter_sum(data, mine, block(n), DataType::f32, stream_);
      case Op::all_gather: return comm_->all_gather(mine, data, block(n), DataType::f32, stream_);
    }
    return Done{};
  }

  Result<Done> exchange_on_device(const std::vector<Transfer>& transfers, bool wait) override {
    if (transfers.empty()) return Done{};
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    std::vector<transport::nccl::P2P> ops;
    for (const Transfer& t : transfers)
      ops.push_back({t.kind == Transfer::send ? transport::nccl::P2P::send : transport::nccl::P2P::recv, t.peer, t.data, t.count});
    return comm_->exchange(ops, DataType::bf16, stream_, wait);
  }
  bool idle() override {
    cudaSetDevice(ordinal_);
    return cudaStreamQuery(stream_) == cudaSuccess;
  }
  Result<Done> drain() override {
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    return comm_->wait(stream_);
  }

  Result<Done> all_reduce_sum(float* data, std::size_t n) override {
    if (n == 0) return Done{};
    if (auto staged = stage_in(data, 0, n, n); !staged) return staged;
    if (auto r = comm_->all_reduce_sum(device_, n, DataType::f32, stream_); !r) return r;
    return stage_out(data, 0, n);
  }

  Result<Done> reduce_scatter_sum(float* data, std::size_t n) override {
    if (n == 0) return Done{};
    const std::size_t q = block(n), total = q * std::size_t(comm_->size());
    if (auto staged = stage_in(data, 0, n, total); !staged) return staged;
    float* mine = device_ + std::size_t(comm_->member()) * q;  // in place: recv = send + member·q
    if (auto r = comm_->reduce_scatter_sum(device_, mine, q, DataType::f32, stream_); !r) return r;
    const Range o = owned(n);
    return stage_out(data, o.lo, o.hi - o.lo);
  }

  Result<Done> all_gather(float* data, std::size_t n) override {
    if (n == 0) return Done{};
    const std::size_t q = block(n), total = q * std::size_t(comm_->size());
    const Range o = owned(n);
    if (auto staged = stage_in(data, o.lo, o.hi - o.lo, total); !staged) return staged;
    float* mine = device_ + std::size_t(comm_->member()) * q;  // in place: send = recv + member·q
    if (auto r = comm_->all_gather(mine, device_, q, DataType::f32, stream_); !r) return r;
    return stage_out(data, 0, n);
  }

 private:
  std::size_t block(std::size_t n) const { return (n + std::size_t(comm_->size()) - 1) / std::size_t(comm_->size()); }

  static Diagnostic cuda_error(const char* what, cudaError_t e) {
    return failure(ErrorKind::internal, std::string("NCCL group staging: ") + what + ": " + cudaGetErrorString(e));
  }
  // Grows the device buffer to `total` elements and copies host[lo, lo + count) to the same
  // place on the device. The rest is not cleared: what it sums or gathers (the padding past n,
  // the other members' blocks before an all-gather) is overwritten or never read back.
  Result<Done> stage_in(const float* host, std::size_t lo, std::size_t count, std::size_t total) {
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    if (total > capacity_) {
      if (device_ != nullptr) cudaFree(device_);
      device_ = nullptr, capacity_ = 0;
      if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&device_), total * sizeof(float)); e != cudaSuccess)
        return cuda_error("cudaMalloc", e);
      capacity_ = total;
    }
    if (cudaError_t e = cudaMemcpyAsync(device_ + lo, host + lo, count * sizeof(float), cudaMemcpyHostToDevice, stream_);
        e != cudaSuccess)
      return cuda_error("copy to the device", e);
    return Done{};
  }
  Result<Done> stage_out(float* host, std::size_t lo, std::size_t count) {
    if (cudaError_t e = cudaMemcpyAsync(host + lo, device_ + lo, count * sizeof(float), cudaMemcpyDeviceToHost, stream_);
        e != cudaSuccess)
      return cuda_error("copy to the host", e);
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) return cuda_error("cudaStreamSynchronize", e);
    return Done{};
  }

  std::unique_ptr<Communicator> comm_;
  int ordinal_;
  cudaStream_t stream_;
  float* device_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

Result<std::unique_ptr<Group>> make_nccl_group(const std::string& name, const std::vector<int>& ranks, int rank, int cuda_ordinal,
                                               rendezvous::Rendezvous& rendezvous, double timeout_s) {
  auto comm = Communicator::create(name, ranks, rank, cuda_ordinal, rendezvous, timeout_s);
  if (!comm) return comm.errors();
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return failure(ErrorKind::internal, std::string("NCCL group '") + name + "': cannot create a stream: " + cudaGetErrorString(e));
  return std::unique_ptr<Group>(std::make_unique<NcclGroup>(std::move(*comm), cuda_ordinal, stream));
}

}  // namespace het::collective
