// The watchdog's verdicts (libexec/progress): which rank a stalled job blames, read from the
// files real Reporters write. Times are given to check() explicitly: nothing here sleeps.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include "progress/progress.hpp"
#include "process.hpp"

using het::progress::Activity;
using het::progress::Reporter;
using het::progress::Watchdog;

namespace {

std::unique_ptr<Reporter> reporter(const std::string& dir, int rank) {
  auto r = Reporter::open(dir, rank);
  REQUIRE(r);
  return std::move(*r);
}

}  // namespace

TEST_CASE("a reporter's file reads back as what it published") {
  het::test::TempDir dir;
  auto r = reporter(dir.path(), 4);
  auto s = het::progress::read(dir.path(), 4);
  REQUIRE(s);
  CHECK(s->activity == Activity::starting);
  CHECK(s->step == -1);
  r->at(7, Activity::receiving, "wait F3 and a name longer than the slot", 2);
  s = het::progress::read(dir.path(), 4);
  REQUIRE(s);
  CHECK(s->rank == 4);
  CHECK(s->step == 7);
  CHECK(s->activity == Activity::receiving);
  CHECK(s->peer == 2);
  CHECK(s->what == "wait F3 and a name long");  // cut to 23 bytes
  CHECK(s->beats == 2);
  CHECK(s->pid > 0);
  CHECK_FALSE(het::progress::read(dir.path(), 5));  // not started
}

TEST_CASE("the watchdog blames the rank at the end of the chain of waits, once nothing moved for the bound") {
  het::test::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  const auto later = [&](double s) { return t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s)); };
  auto r0 = reporter(dir.path(), 0), r1 = reporter(dir.path(), 1), r2 = reporter(dir.path(), 2);
  r0->at(3, Activity::receiving, "wait F1", 1);
  r1->at(3, Activity::receiving, "wait F1", 2);
  r2->at(3, Activity::computing, "F1");
  Watchdog dog(dir.path(), {0, 1, 2}, 5, true, t0);
  CHECK_FALSE(dog.check(t0));
  CHECK_FALSE(dog.check(later(4)));
  // A watchdog that first reads the files as they are now, then 6 s later (past its bound).
  auto verdict = [&](bool all) {
    Watchdog fresh(dir.path(), {0, 1, 2}, 5, all, t0);
    CHECK_FALSE(fresh.check(t0));
    return fresh.check(later(6));
  };
  SECTION("a rank inside a computation") {
    auto stall = dog.check(later(6));
    REQUIRE(stall);
    CHECK(stall->rank == 2);
    CHECK_FALSE(stall->remote);
    CHECK_THAT(stall->why, Catch::StartsWith("rank 2 hung: no progress for 6.0 s at step 3, F1") &&
                               Catch::Contains("inside a computation"));
  }
  SECTION("any progress restarts the clock") {
    r0->at(3, Activity::computing, "F1");
    CHECK_FALSE(dog.check(later(4.5)));
    CHECK_FALSE(dog.check(later(9)));  // rank 0 moved at 4.5
    CHECK(dog.check(later(9.6)));
    CHECK(dog.still_s(later(9.6)) == Approx(9.6));
  }
  SECTION("a chain that ends in a collective") {
    r2->at(3, Activity::collective, "tp all-reduce");
    auto stall = verdict(true);
    REQUIRE(stall);
    CHECK(stall->rank == 2);
    CHECK_THAT(stall->why, Catch::Contains("the ranks waiting for it wait in vain; it is in a collective"));
  }
  SECTION("a node agent, which sees some of the ranks, does not blame its own rank in a collective") {
    r2->at(3, Activity::collective, "sync");
    auto stall = verdict(false);
    REQUIRE(stall);
    CHECK(stall->remote);
    CHECK(stall->rank == -1);
    CHECK_THAT(stall->why, Catch::Contains("rank 2 made no progress") && Catch::Contains("with ranks on other nodes"));
    r2->at(3, Activity::computing, "optimizer");  // but a computation is its own
    stall = verdict(false);
    REQUIRE(stall);
    CHECK_FALSE(stall->remote);
    CHECK(stall->rank == 2);
  }
  SECTION("a cycle of waits is a deadlock") {
    r2->at(3, Activity::receiving, "wait B0", 0);
    auto stall = verdict(true);
    REQUIRE(stall);
    CHECK_THAT(stall->why, Catch::Contains("in a cycle (a deadlock)"));
  }
  SECTION("a chain that leaves this node names the remote rank") {
    r2->at(3, Activity::receiving, "wait F1", 9);
    auto stall = verdict(true);
    REQUIRE(stall);
    CHECK(stall->rank == 9);
    CHECK(stall->remote);
    CHECK_THAT(stall->why, Catch::Contains("waits for rank 9 on another node"));
  }
  SECTION("finished ranks are not waited for") {
    for (auto* r : {r0.get(), r1.get(), r2.get()}) r->at(10, Activity::finished, "done");
    Watchdog fresh(dir.path(), {0, 1, 2}, 5, true, t0);
    CHECK_FALSE(fresh.check(t0));
    CHECK_FALSE(fresh.check(later(100)));
    CHECK(fresh.still_s(later(100)) == 0);
  }
}

TEST_CASE("a rank that never started is blamed once the start's bound passes") {
  het::test::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto r0 = reporter(dir.path(), 0);
  Watchdog dog(dir.path(), {0, 1}, 2, true, t0);
  CHECK_FALSE(dog.check(t0));
  CHECK_FALSE(dog.check(t0 + std::chrono::seconds(3)));  // a slow start (CUDA, NCCL) is not a hang
  auto stall = dog.check(t0 + std::chrono::seconds(121));
  REQUIRE(stall);
  CHECK_THAT(stall->why, Catch::Contains("while starting"));
}

// Found by the chaos trials (tests/chaos_test.cpp): a worker stopped before it first published
// (while loading its plan) left run-local waiting for the start's 120 s, and the process that
// outlived its killed launcher was still stopped.
TEST_CASE("a rank stopped before it first published is blamed at the plain bound, by the pid its supervisor started") {
  het::test::TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  auto r0 = reporter(dir.path(), 0);
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(child > 0);
  ::kill(child, SIGSTOP);
  for (int i = 0; i < 100; ++i) {  // until the kernel shows it stopped
    std::ifstream in("/proc/" + std::to_string(child) + "/stat");
    std::string all((std::istreambuf_iterator<char>(in)), {});
    if (all.find(") T ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Watchdog dog(dir.path(), {0, 1}, 2, true, t0);
  CHECK_FALSE(dog.check(t0));
  CHECK_FALSE(dog.check(t0 + std::chrono::seconds(3)));  // rank 1 has no file: it may be starting (120 s)
  dog.spawned(1, int(child));
  auto stall = dog.check(t0 + std::chrono::seconds(3));
  ::kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  REQUIRE(stall);
  CHECK(stall->rank == 1);
  CHECK_THAT(stall->why, Catch::Contains("rank 1 hung") && Catch::Contains("(pid " + std::to_string(child) + ") is stopped"));
}

TEST_CASE("the default bound is five predicted steps as the run executes them, at least 10 s") {
  CHECK(het::progress::default_bound_s(0, 1) == 10);
  CHECK(het::progress::default_bound_s(0.1, 8) == 10);
  CHECK(het::progress::default_bound_s(1, 4) == 20);
}
