// libexec/backend/cuda/kernels.cu compiled as C++ against this directory's emulated CUDA
// headers (emulation.hpp), for the emulation tests.
#include "backend/cuda/kernels.cu"
