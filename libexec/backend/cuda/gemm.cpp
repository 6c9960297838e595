// cuBLASLt GEMMs for row-major tensors. cuBLASLt is column-major, so a row-major [R, K] tensor
// is read as a column-major [K, R] one; each product below is written in those terms.
#include "backend/cuda/gemm.hpp"

#include <memory>
#include <string>

namespace het::cuda {

namespace {
constexpr std::size_t kWorkspaceBytes = 32u << 20;  // what cuBLASLt's fastest Hopper kernels ask for

// RAII for the cuBLASLt descriptors of one call.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, int rows, int cols, int ld) { check_cublas(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld), "cublasLtMatrixLayoutCreate"); }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};
struct Desc {
  cublasLtMatmulDesc_t h = nullptr;
  Desc() { check_cublas(cublasLtMatmulDescCreate(&h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"); }
  ~Desc() { cublasLtMatmulDescDestroy(h); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  template <class V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    check_cublas(cublasLtMatmulDescSetAttribute(h, a, &v, sizeof v), "cublasLtMatmulDescSetAttribute");
  }
};
struct Preference {
  cublasLtMatmulPreference_t h = nullptr;
  Preference() { check_cublas(cublasLtMatmulPreferenceCreate(&h), "cublasLtMatmulPreferenceCreate"); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(h); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};
}  // namespace

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string("cuBLASLt error in ") + what + ": " + cublasLtGetStatusString(status));
}

Gemm::Gemm(cudaStream_t stream) : stream_(stream), workspace_(kWorkspaceBytes) {
  check_cublas(cublasLtCreate(&handle_), "cublasLtCreate");
}

Gemm::~Gemm() {
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::matmul(void* d, const void* c, cudaDataType_t cd, const bf16* a, bool ta, int lda, const bf16* b, bool tb, int ldb, int m,
                  int n, int k, float beta, const bf16* bias) {
  if (m == 0 || n == 0) return;
  Desc desc;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, opa);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, opb);
  if (bias) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  }
  // Stored shapes: A is [m,k] (or [k,m] when transposed), B is [k,n] (or [n,k]).
  Layout la(CUDA_R_16BF, ta ? k : m, ta ? m : k, lda), lb(CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb), lc(cd, m, n, m);
  const std::size_t ws = workspace_.bytes();
  const Key key{m, n, k, lda, ldb, ta, tb, int(cd), bias != nullptr};
  auto it = algos_.find(key);
  if (it == algos_.end()) {  // the heuristic once per problem: it costs more than many small GEMMs
    Preference pref;
    check_cublas(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_cublas(cublasLtMatmulAlgoGetHeuristic(handle_, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &heuristic, &found),
                 "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
      throw CudaError("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                      " bf16 GEMM");
    it = algos_.emplace(key, heuristic.algo).first;
  }
  const float alpha = 1;
  check_cublas(cublasLtMatmul(handle_, desc.h, &alpha, a, la.h, b, lb.h, &beta, c ? c : d, lc.h, d, lc.h, &it->second,
                              workspace_.get(), ws, stream_),
               "cublasLtMatmul");
}

// out^T[OC,N] = w^T... in column-major terms: D[OC,N] = op_T(w stored [C,OC]) · inp stored [C,N].
void Gemm::forward(bf16* out, const bf16* inp, const bf16* w, const bf16* bias, const bf16* residual, int N, int C, int OC) {
  matmul(out, residual, CUDA_R_16BF, w, true, C, inp, false, C, OC, N, C, residual ? 1.f : 0.f, bias);
}

// D[C,N] = w stored [C,OC] · dout stored [OC,N].
void Gemm::backward_input(bf16* dinp, const bf16* dout, const bf16* w, int N, int C, int OC, bool accumulate) {
  matmul(dinp, nullptr, CUDA_R_16BF, w, false, C, dout, false, OC, C, N, OC, accumulate ? 1.f : 0.f, nullptr);
}

// D[C,OC] = inp stored [C,N] · op_T(dout stored [OC,N]), accumulated into the fp32 gradient.
void Gemm::backward_weight(float* dw, const bf16* dout, const bf16* inp, int N, int C, int OC) {
  matmul(dw, nullptr, CUDA_R_32F, inp, false, C, dout, true, OC, C, OC, N, 1.f, nullptr);
}

}  // namespace het::cuda
