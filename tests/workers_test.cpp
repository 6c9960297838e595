// What reaches a worker and what comes back from it (libexec/launch): its job as data, every
// number read back exactly, and its output made valid UTF-8 before it can reach a status,
// a log or a protobuf string (issue 18: one non-UTF-8 line once broke every Describe).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "launch/worker_job.hpp"
#include "launch/cause.hpp"
#include "launch/workers.hpp"

using het::launch::read_worker_job;
using het::launch::to_json;
using het::launch::worker_job_from_json;
using het::launch::WorkerJob;
using het::launch::write_worker_job;
using het::launch::valid_utf8;

TEST_CASE("a worker's job travels as data: every value reads back exactly") {
  WorkerJob w;
  w.plan = "/jobs/7/plan.json", w.model = "model.yaml", w.data = "/data/tokens.bin";
  w.steps = 123456, w.seed = UINT64_MAX, w.backend = "cuda", w.threads = 7;
  w.emulate_links = true, w.world = 736, w.rendezvous = "grpc://10.0.0.1:5000/job-7", w.host = "10.0.0.2";
  w.token_file = "/etc/het/token", w.rendezvous_ca = "/jobs/7/ca.pem", w.progress_dir = "/jobs/7", w.trace_events = "/tmp/t/rank";
  const std::string file = (std::filesystem::temp_directory_path() / ("het-worker-job-" + std::to_string(getpid()) + ".json")).string();
  // Issue 18: `--lr 1e-7` reached the ranks as 0.000000, and 1.23456e-5 as 1.2e-5.
  for (double v : {1e-7, 1.23456e-5, 3e-4, 0.1, 1.0 / 3, 2.5, 10.0, DBL_MIN, std::nextafter(1e-3, 1.0)}) {
    w.lr = v, w.slowdown = 1 + v, w.time_dilation = 1000 - v;
    INFO(v);
    REQUIRE(write_worker_job(file, w));
    auto back = read_worker_job(file);
    REQUIRE(back);
    CHECK(*back == w);  // bit for bit: == on doubles
  }
  CHECK(std::filesystem::status(file).permissions() == (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  std::filesystem::remove(file);
}

TEST_CASE("a worker's job file with a wrong field, type or value is refused, naming the field") {
  WorkerJob w;
  w.plan = "plan.json", w.rendezvous = "/tmp/r";
  auto errors = [&](nlohmann::json j) {
    auto r = worker_job_from_json(j, "job.json");
    REQUIRE_FALSE(r);
    return to_string(r.errors());
  };
  const auto good = to_json(w);
  REQUIRE(worker_job_from_json(good, "job.json"));
  auto with = [&](const char* key, nlohmann::json v) {
    auto j = good;
    j[key] = std::move(v);
    return j;
  };
  CHECK_THAT(errors(with("learning_rate", 0.1)), Catch::Contains("job.json: learning_rate: is not a field"));
  CHECK_THAT(errors(with("lr", "1e-3")), Catch::Contains("lr: must be a number"));
  CHECK_THAT(errors(with("lr", nullptr)), Catch::Contains("lr: must be a number"));  // what inf and nan dump as
  CHECK_THAT(errors(with("lr", 0)), Catch::Contains("lr: must be a finite number above 0"));
  CHECK_THAT(errors(with("steps", 2.5)), Catch::Contains("steps: must be an integer"));
  CHECK_THAT(errors(with("steps", std::uint64_t{1} << 40)), Catch::Contains("steps: must be an integer"));
  CHECK_THAT(errors(with("world", 0)), Catch::Contains("world: must be at least 1"));
  CHECK_THAT(errors(with("seed", -1)), Catch::Contains("seed: must be an integer from 0"));
  CHECK_THAT(errors(with("time_dilation", 0.5)), Catch::Contains("time_dilation: must be from 1 to 1000"));
  CHECK_THAT(errors(with("backend", "tpu")), Catch::Contains("backend: must be cpu or cuda"));
  CHECK_THAT(errors(with("data", std::string("a\0b", 3))), Catch::Contains("data: contains a NUL byte"));
  CHECK_THAT(errors(with("version", 2)), Catch::Contains("version: is 2; this hetexec reads version 1"));
  auto no_plan = good;
  no_plan.erase("plan");
  CHECK_THAT(errors(no_plan), Catch::Contains("plan: is missing"));
  CHECK_THAT(errors(nlohmann::json::array()), Catch::Contains("must be a JSON object"));
  // The writer refuses what a worker would refuse.
  w.lr = std::numeric_limits<double>::infinity();
  auto written = write_worker_job("/nonexistent/job.json", w);
  REQUIRE_FALSE(written);
  CHECK_THAT(to_string(written.errors()), Catch::Contains("lr: must be a finite number above 0"));
}

TEST_CASE("a worker's job file with a number past a double is refused as not JSON, not a crash") {
  // The JSON parser reports 1e999 as out of range, not as a syntax error; the reader once let
  // that escape and the worker died in std::terminate (found by tests/fuzz/worker_job.cpp).
  const std::string file = (std::filesystem::temp_directory_path() / ("het-worker-job-big-" + std::to_string(getpid()) + ".json")).string();
  for (const char* number : {"1e999", "-1e999", "1.2347e650"}) {
    INFO(number);
    std::ofstream(file) << R"({"version": 1, "plan": "plan.json", "rendezvous": "/tmp/r", "lr": )" << number << "}";
    auto job = read_worker_job(file);
    REQUIRE_FALSE(job);
    CHECK_THAT(to_string(job.errors()), Catch::Contains(file + ": not JSON") && Catch::Contains("number overflow"));
  }
  std::filesystem::remove(file);
}

TEST_CASE("worker output is made valid UTF-8 on one line") {
  CHECK(valid_utf8("loss 3.25, step 7") == "loss 3.25, step 7");
  CHECK(valid_utf8("tab\tkept") == "tab\tkept");
  CHECK(valid_utf8("π ≈ 3.14 🙂") == "π ≈ 3.14 🙂");  // 2-, 3- and 4-byte sequences kept
  const std::string r = "\xEF\xBF\xBD";             // U+FFFD
  CHECK(valid_utf8("a\xFF" "b") == "a" + r + "b");
  CHECK(valid_utf8("\xC0\xAF") == r + r);              // overlong '/'
  CHECK(valid_utf8("\xED\xA0\x80") == r + r + r);      // a surrogate
  CHECK(valid_utf8("\xF4\x90\x80\x80") == r + r + r + r);  // above U+10FFFF
  CHECK(valid_utf8("cut \xE2\x82") == "cut " + r + r);  // a sequence cut short
  CHECK(valid_utf8(std::string("nul\0bell\a\x1b[31m", 14)) == "nul" + r + "bell" + r + r + "[31m");
}

TEST_CASE("a worker that prints invalid UTF-8 reaches the supervisor as valid text") {
  het::launch::WorkerGroup group;
  std::vector<het::launch::WorkerEvent> events;
  auto run = group.run({{0, {"/bin/sh", "-c", "printf 'ok\\n\\377\\376 bad \\001\\n' && printf 'err \\300\\n' >&2"}}},
                       [&](const het::launch::WorkerEvent& e) { events.push_back(e); });
  REQUIRE(run);
  std::vector<std::string> out, err;
  for (const auto& e : events)
    if (e.kind == het::launch::WorkerEvent::Kind::line) (e.from_stderr ? err : out).push_back(e.text);
  const std::string r = "\xEF\xBF\xBD";
  CHECK(out == std::vector<std::string>{"ok", r + r + " bad " + r});
  CHECK(err == std::vector<std::string>{"err " + r});
}

TEST_CASE("root cause by kind: a worker's exit status carries its error's kind, and the first failure of the highest precedence is the cause") {
  using het::ErrorKind;
  using namespace het::launch;
  for (ErrorKind k : {ErrorKind::invalid_input, ErrorKind::unsupported, ErrorKind::peer_lost, ErrorKind::hung, ErrorKind::killed,
                      ErrorKind::aborted, ErrorKind::internal}) {
    INFO(het::to_string(k));
    CHECK(kind_of_exit(exit_status_of(k), 0) == k);
    CHECK(exit_status_of(k) != 0);
  }
  CHECK(exit_status_of(ErrorKind::invalid_input) == 2);  // as every command's bad input
  CHECK(kind_of_exit(1, 0) == ErrorKind::internal);
  CHECK(kind_of_exit(99, 0) == ErrorKind::internal);      // a status no kind has
  CHECK(kind_of_exit(-1, 9) == ErrorKind::killed);
  CHECK(kind_of_exit(-1, 11) == ErrorKind::killed);       // a crash
  // Consequences come before their cause as often as after it.
  CHECK(root_cause({ErrorKind::peer_lost, ErrorKind::peer_lost, ErrorKind::killed, ErrorKind::peer_lost}) == 2);
  CHECK(root_cause({ErrorKind::aborted, ErrorKind::peer_lost, ErrorKind::internal}) == 2);
  CHECK(root_cause({ErrorKind::peer_lost, ErrorKind::aborted}) == 0);
  CHECK(root_cause({ErrorKind::aborted, ErrorKind::unsupported, ErrorKind::hung}) == 2);
  // Among equals, the first seen.
  CHECK(root_cause({ErrorKind::hung, ErrorKind::killed}) == 0);
  CHECK(root_cause({ErrorKind::invalid_input, ErrorKind::internal}) == 0);
  CHECK(precedence(ErrorKind::killed) > precedence(ErrorKind::internal));
  CHECK(precedence(ErrorKind::internal) > precedence(ErrorKind::peer_lost));
  CHECK(precedence(ErrorKind::peer_lost) > precedence(ErrorKind::aborted));
}
