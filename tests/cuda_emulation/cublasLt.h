// Emulation of <cublasLt.h> for tests/cuda_emulation: the subset the CUDA backend's Gemm
// (libexec/backend/cuda/gemm.cpp) calls, computing cublasLtMatmul as NVIDIA documents it —
// column-major D = alpha·op(A)·op(B) + beta·C (+ the bias epilogue: bias[i] added to row i of
// every column), fp32 accumulation, the result rounded to D's type — and refusing, as cuBLASLt
// does, layouts that do not fit the operation (rows/cols against op and m, n, k; ld < rows).
#pragma once
#include <cstdint>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime_api.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
inline const char* cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
                                                                                                 : "CUBLAS_STATUS_NOT_SUPPORTED";
}
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtEpilogue_t { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 };
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtMatmulPreferenceAttributes_t { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 };

struct cublasLtContext {};
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
};
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
struct cublasLtMatmulPreferenceOpaque_t {
  std::size_t workspace = 0;
};
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { return *h = new cublasLtContext, CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return delete h, CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return *d = new cublasLtMatmulDescOpaque_t, CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return delete d, CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v,
                                                     std::size_t n) {
  auto get = [&](auto& field) {
    if (n != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, v, n);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return get(d->bias_type);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, std::uint64_t rows, std::uint64_t cols,
                                                 std::int64_t ld) {
  if (ld < std::int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  return *l = new cublasLtMatrixLayoutOpaque_t{t, rows, cols, ld}, CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { return delete l, CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  return *p = new cublasLtMatmulPreferenceOpaque_t, CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { return delete p, CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                           const void* v, std::size_t n) {
  if (a != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || n != sizeof p->workspace) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&p->workspace, v, n);
  return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
// The shape check cuBLASLt makes: op(A) is m×k, op(B) k×n, C and D m×n.
inline bool fits(const cublasLtMatrixLayoutOpaque_t& l, cublasOperation_t op, std::uint64_t r, std::uint64_t c) {
  return op == CUBLAS_OP_N ? (l.rows == r && l.cols == c) : (l.rows == c && l.cols == r);
}
inline float element(const void* p, cudaDataType_t t, std::int64_t i) {
  return t == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}
}  // namespace emu

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a,
                                                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                     cublasLtMatmulPreference_t, int requested, cublasLtMatmulHeuristicResult_t* out,
                                                     int* found) {
  if (!a || !b || !c || !d || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  out[0] = cublasLtMatmulHeuristicResult_t{};
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C,
                                     cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void*,
                                     std::size_t, cudaStream_t) {
  const std::uint64_t m = ld->rows, n = ld->cols, k = desc->transa == CUBLAS_OP_N ? la->cols : la->rows;
  if (!emu::fits(*la, desc->transa, m, k) || !emu::fits(*lb, desc->transb, k, n) || lc->rows != m || lc->cols != n ||
      (la->type != CUDA_R_16BF && la->type != CUDA_R_32F) || la->type != lb->type || lc->type != ld->type)
    return CUBLAS_STATUS_INVALID_VALUE;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
  std::vector<float> out(m * n);  // computed whole before D is written: C may be D
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      float s = 0;
      for (std::uint64_t p = 0; p < k; ++p) {
        const std::int64_t ai = desc->transa == CUBLAS_OP_N ? std::int64_t(i + p * la->ld) : std::int64_t(p + i * la->ld);
        const std::int64_t bi = desc->transb == CUBLAS_OP_N ? std::int64_t(p + j * lb->ld) : std::int64_t(j + p * lb->ld);
        s += emu::element(A, la->type, ai) * emu::element(B, lb->type, bi);
      }
      float v = a * s + (b != 0 ? b * emu::element(C, lc->type, std::int64_t(i + j * lc->ld)) : 0.f);
      if (bias) v += emu::element(desc->bias, desc->bias_type, std::int64_t(i));
      out[i + j * m] = v;
    }
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      const std::int64_t at = std::int64_t(i + j * ld->ld);
      if (ld->type == CUDA_R_16BF) static_cast<__nv_bfloat16*>(D)[at] = __float2bfloat16(out[i + j * m]);
      else static_cast<float*>(D)[at] = out[i + j * m];
    }
  return CUBLAS_STATUS_SUCCESS;
}
