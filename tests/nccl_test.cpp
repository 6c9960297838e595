// NCCL communicators on real GPUs (label gpu). `het_nccl_tests --need-gpus N [catch args]`
// exits 77 (ctest: skipped) when this machine has fewer than N CUDA devices, and never
// counts as passed there. Two ranks on one GPU are refused by NCCL, so the one-GPU tests use
// communicators of size 1 (and a group whose second member never comes, to see the timeout);
// the two-process test needs 2 GPUs. `--nccl-worker RANK DIR` is the worker of that test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "process.hpp"
#include "rendezvous/directory.hpp"
#include "transport/nccl.hpp"

namespace nccl = het::transport::nccl;

namespace {

struct Device {
  float* p = nullptr;
  explicit Device(std::size_t n) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess); }
  ~Device() { cudaFree(p); }
  void put(const std::vector<float>& v) { REQUIRE(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<float> get(std::size_t n) const {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

// Rank `rank` of 2 on device `rank`: every operation, checked; 0 when all were right.
int worker(int rank, const std::string& dir) {
  het::rendezvous::DirectoryRendezvous rendezvous(dir);
  auto comm = nccl::Communicator::create("pair", {0, 1}, rank, rank, rendezvous, 60);
  if (!comm) return std::fprintf(stderr, "%s\n", het::to_string(comm.errors()).c_str()), 2;
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const std::size_t n = 1000;
  float* a;
  float* b;
  cudaMalloc(reinterpret_cast<void**>(&a), 2 * n * 4);
  cudaMalloc(reinterpret_cast<void**>(&b), 2 * n * 4);
  std::vector<float> mine(2 * n, static_cast<float>(rank + 1)), out(2 * n);
  auto check = [&](const het::Result<het::Done>& r, const char* what, float expect, std::size_t count) {
    if (!r) return std::fprintf(stderr, "%s: %s\n", what, het::to_string(r.errors()).c_str()), false;
    cudaMemcpy(out.data(), b, count * 4, cudaMemcpyDeviceToHost);
    for (std::size_t i = 0; i < count; ++i)
      if (out[i] != (expect < 0 ? (i < n ? 1.0f : 2.0f) : expect))
        return std::fprintf(stderr, "%s: element %zu is %g\n", what, i, out[i]), false;
    return true;
  };
  cudaMemcpy(b, mine.data(), 2 * n * 4, cudaMemcpyHostToDevice);
  if (!check((*comm)->all_reduce_sum(b, 2 * n, nccl::DataType::f32, stream), "all-reduce", 3, 2 * n)) return 1;
  cudaMemcpy(a, mine.data(), 2 * n * 4, cudaMemcpyHostToDevice);
  if (!check((*comm)->reduce_scatter_sum(a, b, n, nccl::DataType::f32, stream), "reduce-scatter", 3, n)) return 1;
  if (!check((*comm)->all_gather(a, b, n, nccl::DataType::f32, stream), "all-gather", -1, 2 * n)) return 1;
  // Both send to each other at once, grouped: the pipeline pattern that would deadlock ungrouped.
  auto r = (*comm)->exchange({{nccl::P2P::send, 1 - rank, a, n}, {nccl::P2P::recv, 1 - rank, b, n}}, nccl::DataType::f32, stream);
  if (!check(r, "send/receive", static_cast<float>(2 - rank), n)) return 1;
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
  return 0;
}

// Rank 1 of 2 that joins the communicator and then dies, or hangs (sleeps, its connections
// open), or does an all-gather where rank 0 does an all-reduce.
int dying_worker(const std::string& dir, const std::string& how) {
  het::rendezvous::DirectoryRendezvous rendezvous(dir);
  auto comm = nccl::Communicator::create("pair", {0, 1}, 1, 1, rendezvous, 60);
  if (!comm) return std::fprintf(stderr, "%s\n", het::to_string(comm.errors()).c_str()), 2;
  if (how == "dies") std::_Exit(3);  // no destructor, no goodbye: as if killed
  if (how == "hangs") {
    ::sleep(20);
    std::_Exit(4);
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  float* a;
  cudaMalloc(reinterpret_cast<void**>(&a), 2 * 64 * 4);
  auto r = (*comm)->all_gather(a, a, 64, nccl::DataType::f32, stream);
  std::fprintf(stderr, "rank 1's all-gather: %s\n", r ? "done" : het::to_string(r.errors()).c_str());
  return 0;
}

}  // namespace

TEST_CASE("nccl: a communicator of one member: its uid in the rendezvous, and every operation", "[one-gpu]") {
  het::test::TempDir dir;
  het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
  auto comm = nccl::Communicator::create("tp0", {5}, 5, 0, rendezvous, 30);
  INFO((comm ? "" : het::to_string(comm.errors())));
  REQUIRE(comm.ok());
  CHECK((*comm)->size() == 1);
  CHECK((*comm)->member() == 0);
  auto uid = rendezvous.wait(nccl::uid_key("tp0"), 1);
  REQUIRE(uid.ok());
  CHECK(uid->size() == 256);  // 128 bytes, hex

  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  const std::size_t n = 4096;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  Device a(n), b(n);
  a.put(host);
  REQUIRE((*comm)->all_reduce_sum(a.p, n, nccl::DataType::f32, stream).ok());
  CHECK(a.get(n) == host);
  REQUIRE((*comm)->reduce_scatter_sum(a.p, b.p, n, nccl::DataType::f32, stream).ok());
  CHECK(b.get(n) == host);
  REQUIRE((*comm)->all_gather(a.p, b.p, n, nccl::DataType::f32, stream).ok());
  CHECK(b.get(n) == host);
  auto self = (*comm)->exchange({{nccl::P2P::send, 0, a.p, n}}, nccl::DataType::f32, stream);
  REQUIRE_FALSE(self.ok());
  CHECK(het::to_string(self.errors()).find("is not another member") != std::string::npos);
  cudaStreamDestroy(stream);

  auto outsider = nccl::Communicator::create("dp0", {1, 2}, 3, 0, rendezvous, 1);
  REQUIRE_FALSE(outsider.ok());
  CHECK(het::to_string(outsider.errors()).find("rank 3 is not one of its ranks") != std::string::npos);
}

TEST_CASE("nccl: a member that never comes gives an error after the timeout, not a hang", "[one-gpu]") {
  het::test::TempDir dir;
  het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = nccl::Communicator::create("pp0-1", {0, 1}, 0, 0, rendezvous, 3);  // rank 1 never starts
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(comm.ok());
  CHECK(het::to_string(comm.errors()).find("did not finish within 3 s") != std::string::npos);
  CHECK(took < 20);
  // The second member waiting for a uid nobody publishes: the rendezvous's timeout, named.
  het::test::TempDir empty;
  het::rendezvous::DirectoryRendezvous nobody(empty.path());
  auto late = nccl::Communicator::create("pp0-1", {0, 1}, 1, 0, nobody, 0.2);
  REQUIRE_FALSE(late.ok());
  CHECK(het::to_string(late.errors()).find("no unique id from its first rank 0") != std::string::npos);
}

TEST_CASE("nccl: two processes on two GPUs: all-reduce, reduce-scatter, all-gather, grouped send/receive", "[two-gpus]") {
  het::test::TempDir dir;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  het::test::Background one({self, "--nccl-worker", "1", dir.path()});
  const het::test::ProcessResult zero = het::test::run_process({self, "--nccl-worker", "0", dir.path()}, 120);
  const het::test::ProcessResult other = one.wait(60);
  INFO("rank 0: " << zero.err << "\nrank 1: " << other.err << one.err());
  CHECK(zero.exit_code == 0);
  CHECK(other.exit_code == 0);
}

// Rank 0 in this process, rank 1 a worker that dies, hangs or does another operation after
// joining (dying_worker): rank 0's all-reduce, and what rank 1 printed.
het::Result<het::Done> against_bad_peer(const char* mode, std::string* worker_err) {
  het::test::TempDir dir;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  het::test::Background one({self, mode, dir.path()});
  het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
  auto comm = nccl::Communicator::create("pair", {0, 1}, 0, 0, rendezvous, std::strcmp(mode, "--nccl-hangs") == 0 ? 3 : 20);
  REQUIRE(comm.ok());
  Device a(256);
  a.put(std::vector<float>(256, 1.0f));
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  auto r = (*comm)->all_reduce_sum(a.p, 256, nccl::DataType::f32, stream);
  if (std::strcmp(mode, "--nccl-hangs") == 0) one.signal(SIGKILL);
  one.wait(60);
  *worker_err = one.err();
  cudaStreamDestroy(stream);
  return r;
}

TEST_CASE("nccl: a member that dies after joining: the others' next operation fails (peer lost), no hang", "[two-gpus]") {
  std::string err;
  auto r = against_bad_peer("--nccl-dies", &err);
  INFO("rank 1: " << err);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().front().kind == het::ErrorKind::peer_lost);
}

TEST_CASE("nccl: a member that hangs after joining: the others' next operation times out and aborts, no hang", "[two-gpus]") {
  // A hang of the abort would hang this test (the worker is killed only after the operation
  // returned), which ctest's timeout reports.
  std::string err;
  auto r = against_bad_peer("--nccl-hangs", &err);
  INFO("rank 1: " << err);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().front().kind == het::ErrorKind::peer_lost);
  CHECK_THAT(het::to_string(r.errors()), Catch::Contains("did not finish within 3 s"));
}

#ifdef HET_CUDA_EMULATION
// NCCL leaves a mismatch undefined (a hang, or wrong data); the emulation names it.
TEST_CASE("nccl emulation: members doing different operations get an error naming both, not wrong data", "[two-gpus]") {
  std::string err;
  auto r = against_bad_peer("--nccl-other-op", &err);
  INFO("rank 1: " << err);
  REQUIRE_FALSE(r.ok());
  CHECK(het::to_string(r.errors()).find("member 1 sent an all-gather of 256 bytes where this member expected an all-reduce of 1024") !=
        std::string::npos);
}
#endif

int main(int argc, char* argv[]) {
  if (argc == 4 && std::strcmp(argv[1], "--nccl-worker") == 0) return worker(std::atoi(argv[2]), argv[3]);
  if (argc == 3 && std::strcmp(argv[1], "--nccl-dies") == 0) return dying_worker(argv[2], "dies");
  if (argc == 3 && std::strcmp(argv[1], "--nccl-hangs") == 0) return dying_worker(argv[2], "hangs");
  if (argc == 3 && std::strcmp(argv[1], "--nccl-other-op") == 0) return dying_worker(argv[2], "other");
  int need = 1;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--need-gpus") == 0 && i + 1 < argc) need = std::atoi(argv[++i]);
    else args.push_back(argv[i]);
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) count = 0;
  if (count < need) {
    std::printf("SKIPPED: %d CUDA device(s) (%s), these tests need %d\n", count,
                e == cudaSuccess ? "found" : cudaGetErrorString(e), need);
    return 77;
  }
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
