#pragma once
// GEMMs of the CUDA backend through cuBLASLt: bf16 operands, fp32 accumulation, row-major
// tensors as in model/ops.hpp (matmul_forward/backward). A Gemm owns the cuBLASLt handle, its
// workspace (allocated once) and the algorithms cuBLASLt's heuristic chose, cached per problem
// (shape, layout, output type, epilogue); one per backend stage (no global state). Operand and
// bias pointers must be 256-byte aligned, cuBLASLt's default assumption when it chooses (the
// starts of device.hpp's buffers are). Errors throw CudaError (device.hpp).
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "backend/cuda/device.hpp"
#include "backend/cuda/kernels.hpp"

namespace het::cuda {

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC]) (+ residual[N,OC]); bias and residual may be
  // null. The bias rides cuBLASLt's epilogue, the residual its C operand (beta = 1).
  void forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, const bf16* residual, int N, int C, int OC);
  // dinp[N,C] = dout[N,OC] @ w[OC,C] (accumulate: +=)
  void backward_input(bf16* dinp, const bf16* dout, const bf16* w, int N, int C, int OC, bool accumulate);
  // dw[OC,C] += dout^T @ inp (fp32 gradient); the bias gradient is kernels.hpp's bias_backward.
  void backward_weight(float* dw, const bf16* dout, const bf16* inp, int N, int C, int OC);

 private:
  // D[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, column-major (the row-major tensors
  // seen transposed). A, B bf16; C, D of type `cd`.
  void matmul(void* d, const void* c, cudaDataType_t cd, const bf16* a, bool ta, int lda, const bf16* b, bool tb, int ldb, int m,
              int n, int k, float beta, const bf16* bias);
  // What the heuristic's choice depends on: m, n, k, lda, ldb, transposes, C/D type, bias.
  using Key = std::tuple<int, int, int, int, int, bool, bool, int, bool>;
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

// "cuBLASLt error in <what>: <status>" as a CudaError when status is not success.
void check_cublas(cublasStatus_t status, const char* what);

}  // namespace het::cuda
