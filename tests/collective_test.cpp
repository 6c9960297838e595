// Collective groups (collective/collective.hpp) without GPUs: the transport choice, seats
// through a directory rendezvous, and the TCP groups' contract — the one the NCCL groups
// share — between real ranks over loopback; and how run-local spreads ranks over GPUs.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <set>
#include <thread>

#include "collective/collective.hpp"
#include "error_text.hpp"
#include "launch/local.hpp"
#include "process.hpp"
#include "rendezvous/directory.hpp"
#include "transport/shared_link.hpp"
#include "transport/tcp.hpp"

namespace col = het::collective;

TEST_CASE("collectives: NCCL only where every member has a GPU of its own in one subcluster") {
  const std::vector<col::Seat> seats = {{"a", "cuda:0", "h100"}, {"a", "cuda:1", "h100"}, {"b", "cuda:0", "h100"},
                                        {"a", "cuda:0", "h100"}, {"c", "cpu", "h100"},    {"d", "cuda:0", "a100"}};
  CHECK(col::choose({0, 1, 2}, seats, true).nccl);
  CHECK(col::choose({0, 1, 2}, seats, true).reason == "every member on a GPU of its own in subcluster h100");
  CHECK_FALSE(col::choose({0, 1, 2}, seats, false).nccl);
  CHECK(col::choose({0, 1, 2}, seats, false).reason == "this build has no NCCL");
  CHECK(col::choose({0, 3}, seats, true).reason == "two members share cuda:0 on a (NCCL refuses two ranks on one GPU)");
  CHECK(col::choose({0, 4}, seats, true).reason == "rank 4 computes on the cpu");
  CHECK(col::choose({2, 5}, seats, true).reason == "members in different subclusters");
  CHECK_FALSE(col::choose({1}, seats, true).nccl);
  // The same ordinal under different CUDA_VISIBLE_DEVICES is a different GPU.
  CHECK(col::choose({0, 1}, {{"a", "cuda:0@2", "x"}, {"a", "cuda:0@3", "x"}}, true).nccl);
}

TEST_CASE("collectives: seats go through the rendezvous, and a malformed one is named") {
  het::test::TempDir dir;
  const int world = 3;
  std::vector<het::Result<std::vector<col::Seat>>> got(world, het::Diagnostic{"", 0, 0, "", "not run"});
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      het::rendezvous::DirectoryRendezvous rdv(dir.path());
      got[std::size_t(r)] = col::exchange_seats(rdv, r, world, {"host" + std::to_string(r), r ? "cuda:" + std::to_string(r) : "cpu", "s"}, 30);
    });
  for (auto& t : threads) t.join();
  const std::vector<col::Seat> want = {{"host0", "cpu", "s"}, {"host1", "cuda:1", "s"}, {"host2", "cuda:2", "s"}};
  for (const auto& g : got) {
    REQUIRE(g.ok());
    CHECK(*g == want);
  }
  het::test::TempDir bad;
  het::rendezvous::DirectoryRendezvous rdv(bad.path());
  REQUIRE(rdv.publish("seat-1", "no newlines").ok());
  auto r = col::exchange_seats(rdv, 0, 2, {"h", "cpu", "s"}, 5);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().front().message == "rank 1 published a malformed seat");
  CHECK(col::seat_here(-1, "x").device == "cpu");
}

TEST_CASE("collectives: TCP groups sum, own a partition of every buffer, and gather it back") {
  het::test::TempDir dir;
  const int world = 3;
  const std::size_t n = 10;  // not a multiple of the group size
  std::vector<std::string> errors(world), summaries(world);
  std::vector<std::vector<col::Range>> owned(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      het::rendezvous::DirectoryRendezvous rdv(dir.path());
      auto peers = het::transport::Peers::connect(r, world, rdv, 30);
      if (!peers) return void(errors[std::size_t(r)] = het::to_string(peers.errors()));
      col::Fabric fabric(**peers, {{"h", "cpu", "s"}, {"h", "cpu", "s"}, {"h", "cpu", "s"}}, rdv, -1, 30);
      auto fail = [&](const std::string& e) { errors[std::size_t(r)] += e; };
      auto failed = [&](const het::Result<het::Done>& done) { fail(het::test::error_text(done)); };
      auto g = fabric.group({0, 1, 2}, 9);
      if (!g) return fail(het::to_string(g.errors()));
      auto again = fabric.group({0, 1, 2}, 9);
      if (!again || *again != *g) fail("the group was made twice; ");
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = float((r + 1) * (int(i) + 1));  // sum over ranks: 6·(i+1)
      std::vector<float> y = x;
      failed((*g)->all_reduce_sum(y.data(), n));
      for (std::size_t i = 0; i < n; ++i)
        if (y[i] != float(6 * (i + 1))) fail("all_reduce_sum: wrong sum at " + std::to_string(i) + "; ");
      failed((*g)->reduce_scatter_sum(x.data(), n));
      const col::Range own = (*g)->owned(n);
      owned[std::size_t(r)].push_back(own);
      for (std::size_t i = own.lo; i < own.hi; ++i)
        if (x[i] != float(6 * (i + 1))) fail("reduce_scatter_sum: wrong sum at " + std::to_string(i) + "; ");
      for (std::size_t i = 0; i < n; ++i)
        if (i < own.lo || i >= own.hi) x[i] = -1;  // what is not owned must come from the others
      failed((*g)->all_gather(x.data(), n));
      for (std::size_t i = 0; i < n; ++i)
        if (x[i] != float(6 * (i + 1))) fail("all_gather: wrong value at " + std::to_string(i) + "; ");
      auto single = fabric.group({r}, 9);
      if (!single || (*single)->owned(n).lo != 0 || (*single)->owned(n).hi != n) fail("a group of one owns everything; ");
      auto outsider = fabric.group({(r + 1) % world}, 9);
      if (outsider) fail("a group without this rank was made; ");
      else if (outsider.errors().front().message.find("is not a member of group") == std::string::npos) fail("outsider error; ");
      summaries[std::size_t(r)] = fabric.summary();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(errors[std::size_t(r)] == "");
    CHECK(summaries[std::size_t(r)] == "tcp: 1 group (rank 0 computes on the cpu)");
  }
  // The owned ranges partition [0, n).
  std::vector<int> covered(n, 0);
  for (const auto& o : owned) {
    REQUIRE(o.size() == 1);
    for (std::size_t i = o[0].lo; i < o[0].hi; ++i) ++covered[i];
  }
  CHECK(covered == std::vector<int>(n, 1));
}

TEST_CASE("collectives: run-local spreads ranks over the GPUs, sharing one only when there are fewer GPUs than ranks") {
  CHECK(het::launch::spread_over_gpus(2, 1) == std::vector<int>{0, 0});
  CHECK(het::launch::spread_over_gpus(4, 2) == std::vector<int>{0, 1, 0, 1});
  CHECK(het::launch::spread_over_gpus(3, 8) == std::vector<int>{0, 1, 2});
  CHECK(het::launch::spread_over_gpus(3, 0).empty());
}

TEST_CASE("emulated links: connections sharing one take turns on it, across processes") {
  using het::transport::SharedLink;
  using std::chrono::seconds;
  const std::string name = "/het-test-" + std::to_string(::getpid());
  auto a = SharedLink::open(name);
  REQUIRE(a);
  const SharedLink::Clock::time_point t0{seconds(1000)};
  // Free since the epoch: a frame queued at t0 leaves after its own time.
  CHECK((*a)->reserve(t0, seconds(2)) == t0 + seconds(2));
  // Another process opening the same name shares it: its frame queued at t0 waits for ours.
  const pid_t child = ::fork();
  if (child == 0) {
    auto b = SharedLink::open(name);
    ::_exit(b && (*b)->reserve(t0, seconds(3)) == t0 + seconds(5) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // ... and ours after it; a frame queued after the link is free starts when queued.
  CHECK((*a)->reserve(t0, seconds(1)) == t0 + seconds(6));
  CHECK((*a)->reserve(t0 + seconds(10), seconds(1)) == t0 + seconds(11));
  // A link of this process only is its own.
  auto own = SharedLink::local();
  CHECK(own->reserve(t0, seconds(1)) == t0 + seconds(1));
  // The name goes with the last handle of this process (the child's went with it).
  a->reset();
  CHECK(::access(("/dev/shm" + name).c_str(), F_OK) != 0);
}

TEST_CASE("emulated links: a rank's two connections shaped on one link send one after the other") {
  // Rank 0 sends `bytes` to ranks 1 and 2 at once, each connection shaped to `bandwidth`: on a
  // shared link the second frame arrives after both frames' time (2 x 0.2 s), not after one.
  het::test::TempDir dir;
  const int world = 3;
  const double bandwidth = 1e6;
  const std::size_t bytes = 200000;
  for (bool shared : {false, true}) {
    INFO((shared ? "shared" : "a link per connection"));
    std::filesystem::create_directories(dir.path() + (shared ? "/s" : "/u"));
    std::vector<double> arrived(world, 0);
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    std::atomic<std::int64_t> sent{0};  // when rank 0 sent (steady_clock ticks)
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        het::rendezvous::DirectoryRendezvous rdv(dir.path() + (shared ? "/s" : "/u"));
        auto peers = het::transport::Peers::connect(r, world, rdv, 30);
        if (!peers) return void(errors[std::size_t(r)] = het::to_string(peers.errors()));
        std::vector<char> data(bytes, char(r));
        if (r == 0) {
          auto link = het::transport::SharedLink::local();
          for (int to : {1, 2}) (*peers)->shape(to, bandwidth, 0, shared ? link : nullptr);
          sent = std::chrono::steady_clock::now().time_since_epoch().count();
          for (int to : {1, 2}) (*peers)->send(to, 7, data.data(), bytes);
          if (auto done = (*peers)->flush(); !done) errors[0] = het::test::error_text(done);
        } else {
          if (auto got = (*peers)->recv(0, 7, data.data(), bytes); !got) errors[std::size_t(r)] = het::test::error_text(got);
          const std::chrono::steady_clock::time_point at{std::chrono::steady_clock::duration(sent.load())};
          arrived[std::size_t(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) CHECK(errors[std::size_t(r)] == "");
    const double one = double(bytes) / bandwidth;
    CHECK(std::min(arrived[1], arrived[2]) >= one);
    if (shared) CHECK(std::max(arrived[1], arrived[2]) >= 2 * one);  // (each on its own link: both after ~one)
  }
}

TEST_CASE("emulated links: a shaped frame is written at once and delivered when the link would deliver it") {
  // Three frames of 100 kB queued at once on a link of 1 MB/s and 0.2 s: frame k leaves the link
  // after (k + 1) x 0.1 s and arrives 0.2 s later. The sender writes them at once (the receiver
  // has their bytes within milliseconds), so delivering any earlier is the hold missing.
  het::test::TempDir dir;
  const double bandwidth = 1e6, latency = 0.2;
  const std::size_t bytes = 100000;
  std::vector<double> arrived(3, 0);
  std::vector<std::string> errors(2);
  std::atomic<std::int64_t> sent{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      het::rendezvous::DirectoryRendezvous rdv(dir.path());
      auto peers = het::transport::Peers::connect(r, 2, rdv, 30);
      if (!peers) return void(errors[std::size_t(r)] = het::to_string(peers.errors()));
      std::vector<char> data(bytes, char(r));
      if (r == 0) {
        (*peers)->shape(1, bandwidth, latency);
        sent = std::chrono::steady_clock::now().time_since_epoch().count();
        for (int k = 0; k < 3; ++k) (*peers)->send(1, 7, data.data(), bytes);
        if (auto done = (*peers)->flush(); !done) errors[0] = het::test::error_text(done);
      } else {
        for (int k = 0; k < 3; ++k) {
          if (auto got = (*peers)->recv(0, 7, data.data(), bytes); !got) return void(errors[1] = het::test::error_text(got));
          const std::chrono::steady_clock::time_point at{std::chrono::steady_clock::duration(sent.load())};
          arrived[std::size_t(k)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count();
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  const double one = double(bytes + 32) / bandwidth;  // the frame: payload and header
  for (int k = 0; k < 3; ++k) {
    INFO("frame " << k << " arrived after " << arrived[std::size_t(k)] << " s");
    CHECK(arrived[std::size_t(k)] >= (k + 1) * one + latency - 1e-3);
  }
}
