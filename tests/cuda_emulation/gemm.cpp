// libexec/backend/cuda/gemm.cpp compiled as C++ against this directory's emulated CUDA and
// cuBLASLt headers, for the emulation tests.
#include "backend/cuda/gemm.cpp"
