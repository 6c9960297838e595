#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <malloc.h>

int main(int argc, char* argv[]) {
  // As in hetexec: the CPU backend allocates per micro-batch; keep freed memory in the process.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return Catch::Session().run(argc, argv);
}
