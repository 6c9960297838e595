// libexec/backend/cuda/stage.cpp compiled as C++ against this directory's emulated CUDA and
// cuBLASLt headers, for the emulation tests.
#include "backend/cuda/stage.cpp"
