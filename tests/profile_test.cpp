#include <catch2/catch.hpp>

#include "spec/profile.hpp"
#include "test_util.hpp"

using namespace het;

namespace {
const char* kProfile = R"(format: hetplan.profile/v1
device: A100-40GB
model: {architecture: gpt, hidden_size: 1024, num_attention_heads: 16, seq_length: 2048}
units:
  - {unit: layer, tp: 1, cp: 1, micro_batch_size: 1, forward: 1.9ms, backward: 3.4ms,
     recompute: 1.9ms, activation_memory: 344MiB, parameter_memory: 48MiB}
  - {unit: layer, tp: 2, micro_batch_size: 1, forward: 1.1ms, backward: 1.9ms}
  - {unit: embedding, tp: 1, cp: 1, micro_batch_size: 1, forward: 0.8ms, backward: 0.01ms}
  - {unit: head, tp: 1, cp: 1, micro_batch_size: 1, forward: 2.1ms, backward: 4.0ms}
optimizer_step: 1.5ms
links:
  intra_node: {latency: 3us, bandwidth: 250GB/s}
)";
}

TEST_CASE("the profile format of the design reads") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  CHECK(p->device == "A100-40GB");
  REQUIRE(p->units.size() == 4);
  CHECK(p->units[0].forward == Approx(1.9e-3));
  CHECK(p->units[0].activation_memory.value() == 344.0 * (1 << 20));
  CHECK(p->units[0].seq_length == 2048);
  CHECK(p->units[0].line == 5);
  CHECK(p->units[1].cp == 1);
  CHECK_FALSE(p->units[1].recompute.has_value());
  CHECK(p->links.at(LinkClass::intra_node).bandwidth == 250e9);
}

TEST_CASE("an old-format profile still reads: four model fields and one optimizer step for every tp") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  CHECK(p->model.hidden_size == 1024);
  CHECK_FALSE(p->model.num_kv_heads.has_value());
  CHECK_FALSE(p->model.ffn_hidden_size.has_value());
  CHECK_FALSE(p->model.vocab_size.has_value());
  REQUIRE(p->optimizer_step.size() == 1);
  CHECK_FALSE(p->optimizer_step[0].tp.has_value());
  CHECK(p->optimizer_step[0].time == Approx(1.5e-3));
  CHECK(p->assumptions.empty());
  // Written back, it keeps the single time.
  CHECK_THAT(write_profile(*p, ""), Catch::Contains("\noptimizer_step: 1.5ms\n"));
}

TEST_CASE("comments after rows (how precisely they were measured) are written on the row's line and read back to the same values") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  ProfileComments comments;
  comments.header = "two\nlines";
  comments.row = [](const ProfileRow& r) { return r.unit == UnitKind::head ? std::string() : "spread " + std::to_string(r.tp) + "%"; };
  comments.optimizer_step = [](const OptimizerStep&) { return std::string("spread 0.5%\n(12 runs)"); };
  const std::string text = write_profile(*p, comments);
  CHECK_THAT(text, Catch::StartsWith("# two\n# lines\nformat: hetplan.profile/v1\n"));
  CHECK_THAT(text, Catch::Contains("backward: 1.9ms, recompute: 1.9ms}  # spread 2%\n") || Catch::Contains("backward: 1.9ms}  # spread 2%\n"));
  CHECK_THAT(text, Catch::Contains("backward: 4ms}\n"));  // the head: no comment
  CHECK_THAT(text, Catch::Contains("\noptimizer_step: 1.5ms  # spread 0.5% (12 runs)\n"));
  auto back = read_profile(test::doc(text, "q.yaml"));
  REQUIRE(back.ok());
  REQUIRE(back->units.size() == p->units.size());
  CHECK(write_profile(*back, "") == write_profile(*p, ""));
}

TEST_CASE("optimizer_step as rows per tp and micro-batch, and assumptions, read back") {
  std::string text = kProfile;
  text.replace(text.find("optimizer_step: 1.5ms"), 21,
               "optimizer_step:\n  - {tp: 1, micro_batch_size: 1, time: 2.94ms}\n  - {tp: 2, time: 1.51ms}\n"
               "assumptions: [\"backward = 2 x forward: a test\"]");
  auto p = read_profile(test::doc(text, "p.yaml"));
  INFO((p ? "" : test::text(p.errors())));
  REQUIRE(p.ok());
  REQUIRE(p->optimizer_step.size() == 2);
  CHECK(p->optimizer_step[0].tp == 1);
  CHECK(p->optimizer_step[0].micro_batch_size == 1);
  CHECK(p->optimizer_step[0].time == Approx(2.94e-3));
  CHECK(p->optimizer_step[1].tp == 2);
  CHECK_FALSE(p->optimizer_step[1].micro_batch_size.has_value());
  CHECK(p->assumptions == std::vector<std::string>{"backward = 2 x forward: a test"});
  auto back = read_profile(test::doc(write_profile(*p, "made by a test"), "q.yaml"));
  REQUIRE(back.ok());
  CHECK(back->optimizer_step.size() == 2);
  CHECK(back->optimizer_step[1].time == Approx(1.51e-3));
  CHECK(back->assumptions == p->assumptions);

  std::string twice = text;
  twice.replace(twice.find("{tp: 2, time"), 12, "{tp: 1, micro_batch_size: 1, time");
  auto dup = read_profile(test::doc(twice, "p.yaml"));
  REQUIRE_FALSE(dup.ok());
  CHECK_THAT(test::text(dup.errors()),
             Catch::Contains("optimizer_step[1]: an optimizer step with tp 1 and micro_batch_size 1 is already given at line"));
  std::string map = kProfile;
  map.replace(map.find("optimizer_step: 1.5ms"), 21, "optimizer_step: {tp: 1, time: 1ms}");
  auto bad = read_profile(test::doc(map, "p.yaml"));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(test::text(bad.errors()), Catch::Contains("optimizer_step: expected a time like 1.5ms or a list of {tp, "
                                                       "[micro_batch_size,] time}, got a map"));
}

TEST_CASE("a profile rejects two rows of the same shape") {
  std::string text = std::string(kProfile) + "";
  text.insert(text.find("optimizer_step"),
              "  - {unit: layer, tp: 2, cp: 1, micro_batch_size: 1, forward: 1ms, backward: 2ms}\n");
  auto p = read_profile(test::doc(text, "p.yaml"));
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(test::text(p.errors()), Catch::Contains("units[4]: a layer row with tp 2, cp 1, micro_batch_size 1 and "
                                                     "seq_length 2048 is already given at line 7"));
}

TEST_CASE("a profile for a model of other dimensions: every differing one is named, absent ones are not checked") {
  auto p = read_profile(test::doc(kProfile, "p.yaml"));
  REQUIRE(p.ok());
  ModelSpec m;
  m.architecture = Architecture::gpt;
  m.hidden_size = 4096;
  m.num_attention_heads = 16;
  m.num_kv_heads = 16;
  m.ffn_hidden_size = 11008;  // the old-format profile does not say, so it is not checked
  m.vocab_size = 32000;
  m.seq_length = 4096;
  auto why = profile_mismatch(*p, m, "the model (m.yaml)");
  REQUIRE(why.size() == 2);
  CHECK(why[0].to_string() == "p.yaml:3: model.hidden_size: the profile was measured for hidden_size 1024, but the "
                              "model (m.yaml) has 4096");
  CHECK(why[1].path == "model.seq_length");
  m.hidden_size = 1024;
  m.seq_length = 2048;
  CHECK(profile_mismatch(*p, m, "m").empty());
  // A profile that records them is checked in all of them.
  p->model = profile_model(m);
  p->model.ffn_hidden_size = 4096;
  p->model.num_kv_heads = 4;
  p->model.vocab_size = 50272;
  auto all = profile_mismatch(*p, m, "m");
  REQUIRE(all.size() == 3);
  CHECK(all[0].path == "model.num_kv_heads");
  CHECK(all[1].path == "model.ffn_hidden_size");
  CHECK(all[2].path == "model.vocab_size");
}
