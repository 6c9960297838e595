// What reaches a worker and what comes back from it (libexec/launch/workers): numbers carried
// exactly on its command line, and its output made valid UTF-8 before it can reach a status,
// a log or a protobuf string (issue 18: one non-UTF-8 line once broke every Describe).
#include <catch2/catch.hpp>

#include <cfloat>
#include <cstdlib>
#include <vector>

#include "launch/workers.hpp"

using het::launch::exact_text;
using het::launch::valid_utf8;

TEST_CASE("numbers reach workers as text that reads back as the same double") {
  for (double v : {1e-7, 1.23456e-5, 3e-4, 0.1, 1.0 / 3, 2.5, 1000.0, DBL_MIN, DBL_MAX, 6.02214076e23}) {
    const std::string t = exact_text(v);
    INFO(t);
    CHECK(std::strtod(t.c_str(), nullptr) == v);
  }
  CHECK(exact_text(1e-7) == "1e-07");
  CHECK(exact_text(1.23456e-5) == "1.23456e-05");
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
