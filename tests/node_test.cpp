#include <catch2/catch.hpp>

#include <unistd.h>

#include "node/node.hpp"

using namespace het::node;

TEST_CASE("node discovery finds this machine's CPUs and memory") {
  NodeInfo n = describe_node();
  CHECK(n.cpu.cores == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  CHECK(n.cpu.memory_bytes > 64.0 * 1024 * 1024);
  CHECK_FALSE(n.hostname.empty());
  // Whatever is absent is explained rather than silently missing.
  if (n.gpus.empty()) CHECK_FALSE(n.notes.empty());
  auto j = to_json(n);
  CHECK(j["cpu"]["cores"] == n.cpu.cores);
}

TEST_CASE("build info reports what this build links") {
  BuildInfo b = build_info("9.9.9");
  CHECK(b.version == "9.9.9");
  CHECK(b.ibverbs);
  if (b.nccl) CHECK(b.cuda);
  if (b.cuda) CHECK_FALSE(b.cuda_runtime.empty());
  // What can run plans: the CPU backend over TCP (tests/runtime_test.cpp runs them), and with
  // NCCL its collective groups (tests/collective_test.cpp).
  CHECK(b.backends == (b.cuda ? std::vector<std::string>{"cpu", "cuda"} : std::vector<std::string>{"cpu"}));
  CHECK(b.transports == (b.nccl ? std::vector<std::string>{"tcp", "nccl"} : std::vector<std::string>{"tcp"}));
}
