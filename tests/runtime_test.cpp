// Plans executed for real: `hetexec run-local` starts one process per rank, they train over
// loopback TCP, and every plan must reproduce single-device training's losses.
#include <catch2/catch.hpp>

#include <atomic>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/data.hpp"
#include "error_text.hpp"
#include "input/input.hpp"
#include "kept_plans.hpp"
#include "launch/worker_job.hpp"
#include "process.hpp"
#include "run_local.hpp"
#include "rendezvous/directory.hpp"
#include "rendezvous/server.hpp"
#include "runtime/pace.hpp"
#include "plan/plan.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"
#include "train/reference.hpp"
#include "transport/tcp.hpp"

using het::test::find_processes;
using het::test::run_process;
using het::test::check_equal;
using het::test::kCluster;
using het::test::reference;
using het::test::run_local;

namespace {

const std::string kSrc = HET_SOURCE_DIR;
// run-local makes its job's directory under $TMPDIR, and its workers' command lines name the
// job file there: a TMPDIR of the test's own tells its workers from those of tests beside it.
class OwnTmpdir {
 public:
  OwnTmpdir() {
    if (const char* old = std::getenv("TMPDIR")) previous_ = old;
    ::setenv("TMPDIR", dir_.path().c_str(), 1);
  }
  ~OwnTmpdir() { previous_ ? ::setenv("TMPDIR", previous_->c_str(), 1) : ::unsetenv("TMPDIR"); }
  const std::string& path() const { return dir_.path(); }

 private:
  het::test::TempDir dir_;
  std::optional<std::string> previous_;
};

}  // namespace

TEST_CASE("run-local reproduces single-device losses: pipeline, TP, DP, CP, 3 stages over 2 subclusters, two pipelines of different layouts and TP") {
  for (const char* model : {"tiny-gpt", "tiny-llama"}) {
    const std::string m = kSrc + "/configs/models/" + model + ".yaml";
    const auto want = reference(m, 10);
    // context: cp 2 → dp 2 → tp 2 × cp 2 over two subclusters (blocks of sequences × time
    // resharded between every pair of stages).
    for (const char* plan : {"pipeline", "tensor", "data", "mixed", "two-pipelines", "two-pipelines-tp", "recompute", "context"}) {
      INFO(model << " with the " << plan << " plan");
      check_equal(run_local(kSrc + "/tests/data/plans/" + plan + ".plan.json", m, 10), want);
    }
  }
}

TEST_CASE("every resharding strategy moves exactly the rank program's bytes between stages and keeps the losses") {
  // Neighbouring stages that differ in dp, cp and tp, within and across subclusters.
  const std::string m = kSrc + "/configs/models/tiny-gpt.yaml";
  const auto want = reference(m, 3);
  het::test::TempDir dir;
  std::map<std::string, std::uint64_t> moved;  // bytes between stages per strategy, over the plans
  for (const char* name : {"context", "mixed", "two-pipelines-tp"}) {
    std::ifstream in(kSrc + "/tests/data/plans/" + name + ".plan.json");
    auto plan = nlohmann::json::parse(in);
    for (het::Resharding r : het::kReshardings) {
      const std::string strategy = het::to_string(r);
      INFO(name << " with " << strategy);
      for (auto& p : plan["pipelines"])
        for (std::size_t s = 0; s + 1 < p["stages"].size(); ++s) p["stages"][s]["resharding"] = strategy;
      const std::string file = dir.write(std::string(name) + "-" + strategy + ".plan.json", plan.dump());
      const std::string traffic = dir.path() + "/" + name + "-" + strategy + ".traffic.json";
      std::string out;
      check_equal(run_local(file, m, 3, {"--traffic-out", traffic}, &out), want);
      CHECK_THAT(out, Catch::Contains("the rank program's") && !Catch::Contains("(they differ)"));
      std::ifstream t(traffic);
      const auto ranks = nlohmann::json::parse(t)["ranks"];
      REQUIRE(ranks.size() >= 4);
      for (const auto& rank : ranks) {
        INFO("rank " << rank["rank"]);
        for (const char* kind : {"activations", "gradients"})
          for (const char* dir2 : {"sent", "received"}) {
            INFO(kind << " " << dir2);
            CHECK(rank["measured"][kind][dir2] == rank["program"][kind][dir2]);
            moved[strategy] += rank["measured"][kind][dir2].get<std::uint64_t>();
          }
      }
    }
  }
  // Strategies that move the tensor across once pay for it inside the stages: through a
  // leader (gather, scatter) more bytes in all than all-pairs' direct sends.
  CHECK(moved["gather-send-scatter"] > moved["all-pairs"]);
  CHECK(moved["inner-dp-rank0"] > moved["all-pairs"]);
}

TEST_CASE("run-local reproduces single-device losses under every schedule kind") {
  const std::string m = kSrc + "/configs/models/tiny-gpt.yaml";
  const auto want = reference(m, 6);
  het::test::TempDir dir;
  for (const char* kind : {"gpipe", "1f1b", "eager-1f1b", "h-1f1b", "virtual-1f1b"}) {
    INFO(kind);
    // The simulator fills in the schedule's warm-up counts; the runtime runs exactly those.
    const std::string plan = dir.path() + "/" + kind + ".json";
    auto s = run_process({HETPLAN_BIN, "simulate", kSrc + "/tests/data/plans/mixed.plan.json", "--model", m, "--cluster",
                          kCluster, "--schedule", kind, "-o", plan});
    REQUIRE(s.exit_code == 0);
    het::test::keep_plan_file(plan);
    check_equal(run_local(plan, m, 6), want);
  }
}

TEST_CASE("ZeRO-1 shards the optimizer state over the sync groups and trains exactly as plain data parallelism") {
  het::test::TempDir dir;
  std::ifstream in(kSrc + "/configs/models/tiny-gpt.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string zero = dir.write("tiny-gpt-zero1.yaml", text.replace(text.find("zero_stage: 0"), 13, "zero_stage: 1"));
  const auto want = reference(kSrc + "/configs/models/tiny-gpt.yaml", 6);
  auto state = [](const std::string& out) {  // "rank 0: cpu (1 threads), AdamW lr 0.001, state N values"
    const auto at = out.find(", state ");
    REQUIRE(at != std::string::npos);
    return std::stod(out.substr(at + 8));
  };
  for (const char* plan : {"data", "two-pipelines-tp"}) {
    INFO(plan);
    std::string plain_out, zero_out;
    const auto plain = run_local(kSrc + "/tests/data/plans/" + plan + ".plan.json", kSrc + "/configs/models/tiny-gpt.yaml", 6, {}, &plain_out);
    const auto sharded = run_local(kSrc + "/tests/data/plans/" + plan + ".plan.json", zero, 6, {}, &zero_out);
    check_equal(sharded, want);
    CHECK(sharded == plain);  // the same sums and the same elementwise updates: bit for bit
    // Rank 0 syncs everything with one other rank: it keeps about half of the moments.
    CHECK(state(zero_out) < 0.6 * state(plain_out));
    // One line says how the ranks are linked: TCP, and why not RDMA.
    CHECK_THAT(plain_out, Catch::Contains("rank 0: links to other ranks over TCP ("));
    // And which transport its sync groups run on: TCP rings, the CPU backend having no GPU.
    CHECK_THAT(plain_out, Catch::Contains("rank 0: its collective groups: tcp: ") && Catch::Contains("computes on the cpu"));
  }
}

TEST_CASE("the CPU backend's results do not depend on its number of threads") {
  const std::string m = kSrc + "/configs/models/tiny-gpt.yaml";
  const std::string plan = kSrc + "/tests/data/plans/tensor.plan.json";
  CHECK(run_local(plan, m, 3, {"--threads", "1"}) == run_local(plan, m, 3, {"--threads", "3"}));
}

TEST_CASE("run-local refuses --gpus with the CPU backend, and a worker a negative --device, with exit 2") {
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/pipeline.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--gpus", "2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--gpus applies to the cuda backend"));
  r = run_process({HETEXEC_BIN, "worker", "--job", "/nonexistent/job.json", "--rank", "0", "--device", "-1"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--device"));
}

TEST_CASE("run-local carries the learning rate to the ranks exactly, and refuses one that is not a finite positive number") {
  // Issue 18: `--lr 1e-7` reached the ranks as `--lr 0.000000`, and 1.23456e-5 trained as 1.2e-5.
  for (const char* lr : {"1e-7", "1.23456e-5"}) {
    INFO(lr);
    std::string out;
    run_local(kSrc + "/tests/data/plans/pipeline.plan.json", kSrc + "/configs/models/tiny-gpt.yaml", 1, {"--lr", lr}, &out);
    CHECK_THAT(out, Catch::Contains("AdamW lr " + nlohmann::json(std::strtod(lr, nullptr)).dump() + ","));
  }
  for (const char* lr : {"inf", "nan", "0", "-1e-3", "11"}) {
    INFO(lr);
    auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/pipeline.plan.json", "--model",
                          kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--lr", lr});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--lr") && Catch::Contains("must be a number above 0 and at most 10"));
  }
}

TEST_CASE("hetexec worker: a job file it cannot use is refused with exit 2, naming the file and the field") {
  het::test::TempDir dir;
  het::launch::WorkerJob w;
  w.plan = kSrc + "/tests/data/plans/pipeline.plan.json", w.rendezvous = dir.path(), w.world = 2;
  auto j = het::launch::to_json(w);
  j["lr"] = "fast";
  const std::string bad = dir.write("bad.json", j.dump());
  auto r = run_process({HETEXEC_BIN, "worker", "--job", bad, "--rank", "0"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(bad + ": lr: must be a number"));
  REQUIRE(het::launch::write_worker_job(dir.path() + "/job.json", w));
  r = run_process({HETEXEC_BIN, "worker", "--job", dir.path() + "/job.json", "--rank", "2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--rank 2: the job has 2 ranks"));
  r = run_process({HETEXEC_BIN, "worker", "--job", "/dev/zero", "--rank", "0"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("not a regular file"));
}

TEST_CASE("run-local refuses output files it cannot write before it runs, with exit 2") {
  for (const char* option : {"--metrics-out", "--trace", "--traffic-out"}) {
    INFO(option);
    auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/pipeline.plan.json", "--model",
                          kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, option, "/nonexistent/dir/out.json"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("cannot write /nonexistent/dir/out.json"));
    CHECK_THAT(r.out, !Catch::Contains("running"));  // no rank started
  }
}

TEST_CASE("run-local refuses an unknown or unbuilt backend with exit 2") {
  for (const char* backend : {"cuda", "tpu"}) {
    auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/pipeline.plan.json", "--model",
                          kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--backend", backend});
    INFO(r.out << r.err);
    if (std::string(backend) == "cuda" && r.exit_code == 0) continue;  // built with CUDA, on a machine with a GPU
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("backend") && Catch::Contains("available: cpu"));
  }
}

TEST_CASE("run-local refuses what it cannot run, with exit 2") {
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/pipeline.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--data", "/nonexistent.bin"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent.bin: cannot open the file"));
}

namespace {
// Runs `body` as each of `world` ranks, one thread each, connected over loopback TCP; returns
// every rank's errors (empty when all went well).
std::vector<std::string> run_ranks(int world, const std::function<std::string(int, het::transport::Peers&)>& body) {
  het::test::TempDir dir;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      het::rendezvous::DirectoryRendezvous rendezvous(dir.path());
      auto peers = het::transport::Peers::connect(r, world, rendezvous, 30);
      errors[r] = peers ? body(r, **peers) : het::to_string(peers.errors());
    });
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace

TEST_CASE("hetexec worker: the ranks of a plan meet through a gRPC rendezvous with a token and train as run-local does") {
  het::rendezvous::ServerOptions options;
  options.security.token = "worker-token";
  auto server = het::rendezvous::RendezvousServer::start(options);
  REQUIRE(server.ok());
  het::test::TempDir dir;
  const std::string token = dir.write("token", "worker-token\n");
  const std::string m = kSrc + "/configs/models/tiny-gpt.yaml";
  const int world = 2;  // the pipeline plan's two stages
  het::launch::WorkerJob job;
  job.plan = kSrc + "/tests/data/plans/pipeline.plan.json", job.model = m, job.cluster = kCluster, job.steps = 3;
  job.world = world, job.rendezvous = "grpc://" + (*server)->address() + "/cli-job", job.token_file = token;
  REQUIRE(het::launch::write_worker_job(dir.path() + "/job.json", job));
  std::vector<het::test::ProcessResult> results(world);
  std::vector<std::thread> workers;
  for (int r = 0; r < world; ++r)
    workers.emplace_back([&, r] {
      results[r] = run_process({HETEXEC_BIN, "worker", "--job", dir.path() + "/job.json", "--rank", std::to_string(r)}, 120);
    });
  for (auto& w : workers) w.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << results[r].err);
    REQUIRE(results[r].exit_code == 0);
  }
  std::vector<double> losses;
  std::istringstream lines(results[0].out);
  for (std::string line; std::getline(lines, line);)  // step lines, after the line naming the backend
    if (auto j = nlohmann::json::parse(line); j.contains("loss")) losses.push_back(j["loss"].get<double>());
  check_equal(losses, reference(m, 3));
}

TEST_CASE("hetexec worker: a wrong rendezvous token or a malformed address is refused and named, with the exit status of invalid input") {
  het::rendezvous::ServerOptions options;
  options.security.token = "worker-token";
  auto server = het::rendezvous::RendezvousServer::start(options);
  REQUIRE(server.ok());
  het::test::TempDir dir;
  auto worker = [&](const std::string& rendezvous, std::optional<std::string> token_file) {
    het::launch::WorkerJob job;
    job.plan = kSrc + "/tests/data/plans/pipeline.plan.json", job.model = kSrc + "/configs/models/tiny-gpt.yaml";
    job.cluster = kCluster, job.world = 2, job.rendezvous = rendezvous, job.token_file = token_file;
    REQUIRE(het::launch::write_worker_job(dir.path() + "/job.json", job));
    return run_process({HETEXEC_BIN, "worker", "--job", dir.path() + "/job.json", "--rank", "0"}, 60);
  };
  auto wrong = worker("grpc://" + (*server)->address() + "/job", dir.write("t", "nope"));
  CHECK(wrong.exit_code == 2);  // invalid input (launch/cause.hpp): not an internal failure
  CHECK_THAT(wrong.err, Catch::Contains("PERMISSION_DENIED: the call's bearer token is wrong"));
  auto empty = worker("grpc://" + (*server)->address() + "/job", dir.write("e", "\n"));
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.err, Catch::Contains("the token file is empty"));
  auto malformed = worker("grpc://127.0.0.1/job", std::nullopt);
  CHECK(malformed.exit_code == 2);
  CHECK_THAT(malformed.err, Catch::Contains("no HOST:PORT (expected grpc://HOST:PORT/JOB)"));
}

TEST_CASE("hetexec worker: the exit status says the kind of its error (unsupported 3, peer lost 4)") {
  het::test::TempDir dir;
  std::string model = het::input::read_file(kSrc + "/configs/models/tiny-gpt.yaml").value();
  model.replace(model.find("zero_stage: 0"), 13, "zero_stage: 3");
  auto job_file = [&](const std::string& model_file, int steps) {
    het::launch::WorkerJob job;
    job.plan = kSrc + "/tests/data/plans/pipeline.plan.json", job.model = model_file, job.cluster = kCluster;
    job.world = 2, job.rendezvous = dir.path(), job.steps = steps;
    const std::string file = dir.path() + "/job-" + std::to_string(steps) + ".json";
    REQUIRE(het::launch::write_worker_job(file, job));
    return file;
  };
  // ZeRO stage 3: a valid model the runtime cannot run.
  auto zero3 = run_process({HETEXEC_BIN, "worker", "--job", job_file(dir.write("zero3.yaml", model), 1), "--rank", "1"}, 60);
  CHECK(zero3.exit_code == 3);
  CHECK_THAT(zero3.err, Catch::Contains("ZeRO stage 3"));
  // Rank 0 killed while training: rank 1 lost its peer.
  const std::string job = job_file(kSrc + "/configs/models/tiny-gpt.yaml", 100000);
  het::test::Background rank0({HETEXEC_BIN, "worker", "--job", job, "--rank", "0"});
  het::test::Background rank1({HETEXEC_BIN, "worker", "--job", job, "--rank", "1"});
  REQUIRE(rank0.wait_for_output("\"step\"", 120));
  rank0.signal(SIGKILL);
  auto lost = rank1.wait(60);
  INFO(lost.err);
  CHECK(lost.exit_code == 4);
  CHECK_THAT(lost.err, Catch::Contains("rank 0 closed the connection") || Catch::Contains("recv from rank 0"));
}

TEST_CASE("TCP peers: a message out of order is an internal error, not a lost peer") {
  const auto errors = run_ranks(2, [&](int r, het::transport::Peers& peers) -> std::string {
    float x[2] = {1, 2};
    if (r == 0) {
      peers.send(1, 5, x, sizeof x);
      return het::test::error_text(peers.flush());
    }
    auto got = peers.recv(0, 6, x, sizeof x);
    if (got) return "a message of another tag was taken";
    if (got.errors().front().kind != het::ErrorKind::internal) return "not internal: " + het::test::error_text(got);
    if (got.errors().front().message.find("sent tag 5 of 8 bytes; expected tag 6 of 8") == std::string::npos)
      return "unnamed: " + het::test::error_text(got);
    return "";
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

TEST_CASE("TCP peers: a ring all-reduce over four ranks sums exactly, and CRC-32 is the standard one") {
  const int world = 4;
  std::vector<std::vector<float>> data(world);
  const auto errors = run_ranks(world, [&](int r, het::transport::Peers& peers) {
    data[r].resize(1000);
    for (std::size_t i = 0; i < data[r].size(); ++i) data[r][i] = float(r * 1000 + int(i));
    return het::test::error_text(het::transport::all_reduce_sum(peers, {0, 1, 2, 3}, data[r].data(), data[r].size(), 7));
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    for (std::size_t i = 0; i < 1000; i += 97) CHECK(data[r][i] == float(6000 + 4 * int(i)));
  }
  CHECK(het::transport::crc32("123456789", 9) == 0xCBF43926u);  // the standard check value
}

TEST_CASE("TCP peers: reduce-scatter, all-gather and broadcast over three ranks") {
  const int world = 3;
  const std::vector<int> group = {2, 0, 1};  // ring order need not be rank order
  std::vector<std::vector<double>> rs(world), ag(world), bc(world);
  const auto errors = run_ranks(world, [&](int r, het::transport::Peers& peers) {
    rs[r].assign(10, double(r + 1));  // sums to 6 everywhere
    std::string err = het::test::error_text(het::transport::reduce_scatter_sum(peers, group, rs[r].data(), 10, 1));
    ag[r].assign(10, -1.0);
    const int c = het::transport::owned_chunk(group, r);
    for (std::size_t i = 10 * std::size_t(c) / 3; i < 10 * std::size_t(c + 1) / 3; ++i) ag[r][i] = double(c);
    err += het::test::error_text(het::transport::all_gather(peers, group, ag[r].data(), 10, 2));
    bc[r].assign(5, r == 1 ? 42.0 : 0.0);
    return err + het::test::error_text(het::transport::broadcast(peers, group, 1, bc[r].data(), 5, 3));
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    const int c = het::transport::owned_chunk(group, r);
    for (std::size_t i = 10 * std::size_t(c) / 3; i < 10 * std::size_t(c + 1) / 3; ++i) CHECK(rs[r][i] == 6.0);
    for (int k = 0; k < 3; ++k)  // every chunk k, from its owner
      for (std::size_t i = 10 * std::size_t(k) / 3; i < 10 * std::size_t(k + 1) / 3; ++i) CHECK(ag[r][i] == double(k));
    for (double v : bc[r]) CHECK(v == 42.0);
  }
}

TEST_CASE("TCP peers: a large message is carried while the receiver is busy, frames sent before a close still arrive, and then the closed peer is lost (kind peer_lost)") {
  // 64 MiB is far beyond the socket buffers: without reading ahead, the sender's flush would
  // wait until the receiver asks for the message, and a transfer could not overlap compute.
  const std::size_t n = std::size_t(16) << 20;
  std::atomic<bool> flushed{false};
  std::vector<float> got;
  const auto errors = run_ranks(2, [&](int r, het::transport::Peers& peers) -> std::string {
    if (r == 0) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = float(i % 1000);
      peers.send(1, 5, x.data(), n * sizeof(float));
      peers.send(1, 6, x.data(), 16);  // sent just before this rank closes its end
      if (auto e = peers.flush(); !e) return het::test::error_text(e);
      flushed = true;
      return "";
    }
    for (int i = 0; i < 300 && !flushed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // "computing"
    if (!flushed) return "the sender's flush did not complete before the receiver asked for the message";
    got.resize(n);
    if (auto e = peers.recv(0, 5, got.data(), n * sizeof(float)); !e) return het::test::error_text(e);
    // Rank 0 may be gone by now: what it sent before still arrives, and then its absence shows.
    float tail[4];
    if (auto e = peers.recv(0, 6, tail, 16); !e) return het::test::error_text(e);
    if (tail[3] != 3.0f) return "the last frame is wrong";
    // Then its absence shows (when it closes, within the receive's wait), as a lost peer: the
    // consequence of its end, not a cause here.
    auto gone = peers.recv(0, 7, tail, 16);
    if (gone) return "a receive from a closed peer succeeded";
    if (gone.errors().front().kind != het::ErrorKind::peer_lost) return "a closed peer is not peer_lost: " + het::test::error_text(gone);
    return "";
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
  REQUIRE(got.size() == n);
  CHECK(got[12345] == float(12345 % 1000));
  CHECK(got[n - 1] == float((n - 1) % 1000));
}

TEST_CASE("when a rank dies mid-run, run-local stops the others and names it") {
  // A run long enough to be killed in the middle; its seed marks its workers.
  const std::string seed = "424242";
  const OwnTmpdir tmp;
  std::thread killer([&] {
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto pids = find_processes({"worker", "--rank 1 ", tmp.path()});
      if (!pids.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it train a little
        ::kill(pids.front(), SIGKILL);
        return;
      }
    }
  });
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/mixed.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--steps", "100000", "--seed", seed},
                       120);
  killer.join();
  INFO(r.out << r.err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank 1 failed: killed by signal 9"));
  CHECK(find_processes({"worker", tmp.path()}).empty());  // no rank left behind
}

TEST_CASE("hetexec profile --devices picks where to measure, and refuses what it cannot measure with exit 2") {
  het::test::TempDir dir;
  const std::string out = dir.path() + "/p.yaml", m = kSrc + "/configs/models/tiny-gpt.yaml";
  auto r = run_process({HETEXEC_BIN, "profile", "--model", m, "--devices", "cpu", "--micro-batch", "1", "--repeats", "1", "-o", out});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("on cpu ("));
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--devices", "tpu:1"}, "--devices: expected cpu or cuda:N, got 'tpu:1'"},
      {{"--devices", "cuda:x"}, "--devices: expected cpu or cuda:N, got 'cuda:x'"},
      {{"--devices", "cuda:0", "--backend", "cpu"}, "--devices cuda:0 runs the cuda backend, but --backend says cpu"},
  };
  for (const auto& [args, why] : refused) {
    std::vector<std::string> argv = {HETEXEC_BIN, "profile", "--model", m, "-o", out};
    argv.insert(argv.end(), args.begin(), args.end());
    auto bad = run_process(argv);
    INFO(bad.err);
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains(why));
  }
  // Without a usable GPU (or without CUDA in the build), cuda:0 is refused in words.
  auto gpu = run_process({HETEXEC_BIN, "profile", "--model", m, "--devices", "cuda:0", "--micro-batch", "1", "--repeats", "1", "-o", out});
  if (gpu.exit_code != 0) {
    CHECK(gpu.exit_code == 2);
    CHECK_THAT(gpu.err, Catch::Contains("CUDA"));
  }
}

TEST_CASE("hetexec profile measures a model on the CPU backend and writes a valid profile") {
  het::test::TempDir dir;
  const std::string out = dir.path() + "/p.yaml";
  auto r = run_process({HETEXEC_BIN, "profile", "--model", kSrc + "/configs/models/tiny-gpt.yaml", "--device", "cpu-fast",
                        "--micro-batch", "1", "2", "--tp", "1", "2", "--repeats", "3", "-o", out});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto v = run_process({HETPLAN_BIN, "validate", "--model", kSrc + "/configs/models/tiny-gpt.yaml", "--profile", out});
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("cpu-fast, 12 rows (embedding/head/layer)"));
  // A TP-2 shard of a layer holds about half its weights and activations; the recompute is
  // the forward again.
  auto p = het::load_profile(out);
  REQUIRE(p.ok());
  // Every dimension of the model it measured (tiny-gpt: kv heads and MLP width by default),
  // and the optimizer step of the tp it was measured at.
  CHECK(p->model.hidden_size == 64);
  CHECK(p->model.num_kv_heads == 4);
  CHECK(p->model.ffn_hidden_size == 256);
  CHECK(p->model.vocab_size == 256);
  CHECK(p->model.seq_length == 32);
  REQUIRE(p->optimizer_step.size() == 1);
  CHECK(p->optimizer_step[0].tp == 1);
  auto layer = [&](int tp) {
    for (const auto& row : p->units)
      if (row.unit == het::UnitKind::layer && row.tp == tp && row.micro_batch_size == 2) return row;
    FAIL("no layer row for tp " << tp);
    return het::ProfileRow{};
  };
  CHECK(*layer(2).parameter_memory < 0.6 * *layer(1).parameter_memory);
  CHECK(*layer(2).activation_memory < 0.75 * *layer(1).activation_memory);
  CHECK(*layer(1).recompute == layer(1).forward);
  auto bad = run_process({HETEXEC_BIN, "profile", "--model", kSrc + "/configs/models/tiny-gpt.yaml", "--tp", "3", "-o", out});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("tp 3 does not divide"));
}

TEST_CASE("hetexec profile measures each point until its median is known, and reports the spread of every row") {
  het::test::TempDir dir;
  const std::string out = dir.path() + "/p.yaml", model = kSrc + "/configs/models/tiny-gpt.yaml";
  for (const std::string threads : {"1", "2"}) {
    INFO("--threads " << threads);
    auto r = run_process({HETEXEC_BIN, "profile", "--threads", threads, "--model", model, "--micro-batch", "1", "2", "--repeats", "40",
                          "--spread", "5", "--max-seconds", "0.5", "-o", out});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("spread  runs") && Catch::Contains("largest spread"));
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    // One thread: the CPU backend computes on the measuring thread, whose CPU time leaves out
    // the time other processes took the core; more threads: wall time.
    CHECK_THAT(text.str(), Catch::Contains(threads == "1" ? "timed by the measuring thread's CPU time" : "timed by wall time"));
    int rows = 0;
    std::istringstream lines(text.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.find("- {unit:") == std::string::npos && line.find("- {tp:") == std::string::npos) continue;
      ++rows;
      INFO(line);
      const auto at = line.find("# spread ");
      REQUIRE(at != std::string::npos);
      CHECK(std::stod(line.substr(at + 9)) >= 0);  // a percentage, not "unknown"
      const auto runs = line.rfind(", ");
      REQUIRE(runs != std::string::npos);
      CHECK(std::stoi(line.substr(runs + 2)) >= 80);  // --repeats in each round, at least two rounds
    }
    CHECK(rows == 7);  // embedding, layer, head for 2 micro-batch sizes, and the optimizer step
    auto p = het::load_profile(out);
    REQUIRE(p.ok());
    CHECK(p->units.size() == 6);
  }
}

TEST_CASE("Ctrl-C stops every rank of run-local, and a killed launcher takes its workers with it") {
  for (int sig : {SIGINT, SIGKILL}) {
    INFO("signal " << sig);
    const std::string seed = sig == SIGINT ? "515151" : "525252";
    const OwnTmpdir tmp;
    std::thread killer([&] {
      for (int i = 0; i < 400; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (find_processes({"worker", "--rank 3 ", tmp.path()}).empty()) continue;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let it train a little
        for (int pid : find_processes({"run-local", "--seed " + seed})) ::kill(pid, sig);
        return;
      }
    });
    const auto start = std::chrono::steady_clock::now();
    auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/mixed.plan.json", "--model",
                          kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--steps", "100000", "--seed", seed},
                         120);
    killer.join();
    INFO(r.out << r.err);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
    if (sig == SIGINT) {
      CHECK(r.exit_code == 130);
      CHECK_THAT(r.err, Catch::Contains("interrupted") && Catch::Contains("stopped all 5 ranks"));
    } else {
      CHECK(r.signal == SIGKILL);
    }
    bool gone = false;  // the kernel stops orphaned workers (PR_SET_PDEATHSIG)
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = find_processes({"worker", tmp.path()}).empty();
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(gone);
  }
}

// Issue 18: a rank that stops (SIGSTOP; in real life a stuck kernel, a wedged NIC) is a failure:
// the watchdog names it once no rank has moved for --hang-timeout, and nothing is left behind.
TEST_CASE("run-local names a stopped rank as hung and stops every rank") {
  const std::string seed = "535353";
  const OwnTmpdir tmp;
  std::thread stopper([&] {
    for (int i = 0; i < 400; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto pids = find_processes({"worker", "--rank 3 ", tmp.path()});
      if (pids.empty()) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // let it train
      ::kill(pids.front(), SIGSTOP);
      return;
    }
  });
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/mixed.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--steps", "100000", "--seed", seed,
                        "--hang-timeout", "3"},
                       120);
  stopper.join();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank 3 hung: no progress for") && Catch::Contains("is stopped"));
  bool gone = false;  // the stopped worker too: SIGKILL ends a stopped process
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = find_processes({"worker", tmp.path()}).empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(gone);
}

TEST_CASE("a traced run gives each compute event its own compute, stretched, the collectives inside left out") {
  het::test::TempDir dir;
  const std::string trace = dir.path() + "/t.json";
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/tensor.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--steps", "2", "--time-dilation", "4",
                        "--trace", trace},
                       120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // Dilated 4x, below the least quiet dilation (8) whatever the cores: run-local says so.
  const int quiet = het::runtime::quiet_dilation(2, int(std::thread::hardware_concurrency()));
  CHECK_THAT(r.out, Catch::Contains("so they contend") && Catch::Contains("run with --time-dilation " + std::to_string(quiet) + " "));
  std::ifstream in(trace);
  auto j = nlohmann::json::parse(in);
  // Per track: the compute events, and the TP all-reduces each holds.
  struct Ev {
    double start, dur, compute;
  };
  std::map<long, std::vector<Ev>> compute, allreduce;
  int waits = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    const bool own = (name[0] == 'F' || name[0] == 'B') && std::isdigit(name[1]);
    const bool has = e.contains("args") && e["args"].contains("compute_us");
    if (own || name == "optimizer" || name == "zero_grad") {
      REQUIRE(has);
      compute[e["tid"]].push_back({e["ts"], e["dur"], e["args"]["compute_us"]});
    } else {
      CHECK_FALSE(has);  // waits and collectives compute nothing
      waits += name == "tp all-reduce";
    }
    if (name == "tp all-reduce") allreduce[e["tid"]].push_back({e["ts"], e["dur"], 0});
  }
  REQUIRE(compute.size() == 2);  // both TP shards
  CHECK(waits > 0);
  for (const auto& [tid, events] : compute) {
    double computed = 0, inside = 0, dur = 0;  // Σ compute, Σ the all-reduces inside the events, Σ their time
    for (const auto& e : events) {
      CHECK(e.compute > 0);
      for (const auto& a : allreduce[tid])
        if (a.start >= e.start && a.start + a.dur <= e.start + e.dur + 1) inside += a.dur;
      computed += e.compute, dur += e.dur;
    }
    // The compute fits in the events beside the all-reduces inside them (which are not compute),
    // within 2%: summed over the run, since one event's may not (the thread's CPU clock on this VM
    // at times ran ahead of the wall clock: a 0.9 ms optimizer step 1.3x its wall time, once in ~20 runs).
    CHECK(computed + inside <= 1.02 * dur);
    // Stretched 4x, it is most of the rest (the CPU time alone: at most a quarter of it).
    CHECK(computed > 0.5 * (dur - inside));
  }
}

TEST_CASE("run-local --trace writes every rank's timeline with the simulator's event names") {
  het::test::TempDir dir;
  const std::string trace = dir.path() + "/t.json";
  auto r = run_process({HETEXEC_BIN, "run-local", kSrc + "/tests/data/plans/mixed.plan.json", "--model",
                        kSrc + "/configs/models/tiny-gpt.yaml", "--cluster", kCluster, "--steps", "2", "--trace", trace},
                       120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(trace);
  auto j = nlohmann::json::parse(in);
  std::set<std::string> tracks, names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") tracks.insert(e["args"]["name"].get<std::string>());
    else names.insert(e["name"].get<std::string>());
  }
  // The same tracks and names as `hetplan simulate --trace` for the first replica and shard.
  CHECK(tracks.count("p0 s0 compute"));
  CHECK(tracks.count("p0 s2 compute"));
  CHECK(tracks.count("p0 s1 d1 t0 compute"));  // the second replica of the dp-2 stage
  for (const char* n : {"F0", "B0", "F7", "B7", "sync", "optimizer"}) CHECK(names.count(n));
}
