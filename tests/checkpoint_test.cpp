// Checkpoints (checkpoint/checkpoint.hpp): spans of sharded tensors, safetensors files, and a
// checkpoint written in pieces by several ranks and read back in other slices.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "process.hpp"

namespace ck = het::checkpoint;
using het::model::Slice;

namespace {

// Every full-tensor index the spans name, in order.
std::vector<std::int64_t> indices(const std::vector<ck::Span>& spans) {
  std::vector<std::int64_t> out;
  for (const auto& s : spans)
    for (std::int64_t k = 0; k < s.count; ++k)
      for (std::int64_t i = 0; i < s.run; ++i) out.push_back(s.start + k * s.stride + i);
  return out;
}

std::string errors_of(const het::Diagnostics& d) { return het::to_string(d); }

}  // namespace

TEST_CASE("checkpoint spans: a shard's local elements as strided runs of the full tensor") {
  // Columns [4, 8) of a [3, 10] matrix: three runs of 4 at stride 10, one span.
  const Slice cols = Slice::column_block({3, 10}, 4, 4);
  CHECK(ck::spans_of(cols, {{0, 12}}) == std::vector<ck::Span>{{4, 4, 10, 3}});
  // Part of it, from the middle of the first row to the middle of the last: a partial run, a
  // whole one, a partial one (each its own span of one run).
  const auto part = ck::spans_of(cols, {{2, 7}});
  CHECK(indices(part) == std::vector<std::int64_t>{6, 7, 14, 15, 16, 17, 24});
  // Rows [2, 4) of a [5, 3] matrix: one contiguous run.
  CHECK(ck::spans_of(Slice::row_block({5, 3}, 2, 2), {{0, 6}}) == std::vector<ck::Span>{{6, 6, 6, 1}});
  // Elements [8, 16) of a vector; local ranges that are not contiguous stay apart.
  CHECK(indices(ck::spans_of(Slice::column_block({32}, 8, 8), {{0, 2}, {5, 3}})) == std::vector<std::int64_t>{8, 9, 13, 14, 15});
  // Every element of every slice maps to slice.global(), whatever the ranges.
  const Slice s = Slice::column_block({7, 9}, 3, 5);
  std::vector<std::int64_t> want;
  for (std::int64_t i = 0; i < s.elements(); ++i) want.push_back(s.global(i));
  CHECK(indices(ck::spans_of(s, {{0, 13}, {13, 22}})) == want);
}

TEST_CASE("safetensors: files read back bit for bit, and a malformed one is refused naming what is wrong") {
  het::test::TempDir dir;
  std::vector<float> a(6), b{1.5f, -2.0f};
  std::iota(a.begin(), a.end(), 0.25f);
  const std::string path = dir.path() + "/t.safetensors";
  // Progress is told at half of the data (32 bytes: inside "a") and at its end, in order.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> told;
  REQUIRE(ck::write(path, {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}}, {{"k", "v"}},
                    [&](std::uint64_t written, std::uint64_t total) { told.emplace_back(written, total); })
              .ok());
  CHECK(told == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{16, 32}, {32, 32}});
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  auto r = ck::Reader::open(path);
  REQUIRE(r.ok());
  CHECK(r->metadata().at("k") == "v");
  CHECK(r->tensors().at("a").shape == std::vector<std::int64_t>{2, 3});
  std::vector<float> got(4);
  REQUIRE(r->read("a", 2, 4, got.data()).ok());
  CHECK(got == std::vector<float>{a[2], a[3], a[4], a[5]});
  CHECK_THAT(errors_of(r->read("a", 4, 3, got.data()).errors()), Catch::Contains("has 6 elements, not [4, 7)"));

  auto refused = [&](const std::string& bytes) {
    const std::string bad = dir.write("bad.safetensors", bytes);
    auto opened = ck::Reader::open(bad);
    REQUIRE_FALSE(opened.ok());
    return errors_of(opened.errors());
  };
  auto file = [](const std::string& header, std::size_t data) {
    const std::uint64_t n = header.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data, '\0');
  };
  CHECK_THAT(refused("abc"), Catch::Contains("shorter than its 8-byte header length"));
  CHECK_THAT(refused(std::string("\xff\xff\xff\xff\xff\xff\xff\x0f", 8)), Catch::Contains("header length"));
  CHECK_THAT(refused(file("[1]", 0)), Catch::Contains("not a JSON object"));
  CHECK_THAT(refused(file(R"({"x":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2)), Catch::Contains("is not F32"));
  CHECK_THAT(refused(file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4)), Catch::Contains("its shape 8"));
  CHECK_THAT(refused(file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4)), Catch::Contains("outside the file"));
  CHECK_THAT(refused(file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8)),
             Catch::Contains("overlap"));
}

TEST_CASE("a checkpoint written in pieces by two ranks is read back in any slice, and one that misses a piece is refused") {
  het::test::TempDir dir;
  const std::string root = dir.path() + "/ck";
  // A [4, 6] tensor w: rank 0 holds columns [0, 3), rank 1 columns [3, 6); a vector b, whole on rank 1.
  std::vector<float> full(24);
  std::iota(full.begin(), full.end(), 1.0f);
  auto piece = [&](const Slice& s, const std::string& name) {
    ck::PieceOut p{name, s.shape, ck::spans_of(s, {{0, s.elements()}}), {}, {}, {}};
    for (std::int64_t i = 0; i < s.elements(); ++i) {
      const float x = name == "b" ? float(s.global(i)) : full[std::size_t(s.global(i))];
      p.value.push_back(x), p.m.push_back(x / 10), p.v.push_back(x / 100);
    }
    return p;
  };
  auto r0 = ck::write_rank(root, 4, 0, {piece(Slice::column_block({4, 6}, 0, 3), "w")});
  auto r1 = ck::write_rank(root, 4, 1, {piece(Slice::column_block({4, 6}, 3, 3), "w"), piece(Slice::whole({5}), "b")});
  REQUIRE(r0.ok());
  REQUIRE(r1.ok());
  // Not visible until committed.
  CHECK(ck::complete_checkpoints(root).empty());
  CHECK_FALSE(ck::Checkpoint::open(root).ok());
  auto dir4 = ck::commit(root, 4, {{"seed", 1}}, {*r0, *r1}, 0);
  REQUIRE(dir4.ok());
  CHECK(dir4->dir == ck::step_dir(root, 4));
  CHECK_FALSE(std::filesystem::exists(ck::partial_dir(root, 4)));

  auto c = ck::Checkpoint::open(root);
  REQUIRE(c.ok());
  CHECK(c->step() == 4);
  CHECK(c->manifest()["seed"] == 1);
  // Rows [1, 3) of w (a TP shard of another plan): they cross both ranks' pieces.
  const Slice rows = Slice::row_block({4, 6}, 1, 2);
  std::vector<float> got(12), m(12);
  REQUIRE(c->read("w", {4, 6}, ck::Field::value, ck::spans_of(rows, {{0, 12}}), got.data()).ok());
  REQUIRE(c->read("w", {4, 6}, ck::Field::m, ck::spans_of(rows, {{0, 12}}), m.data()).ok());
  for (std::size_t i = 0; i < 12; ++i) {
    CHECK(got[i] == full[6 + i]);
    CHECK(m[i] == full[6 + i] / 10);
  }
  CHECK_THAT(errors_of(c->read("w", {6, 4}, ck::Field::value, {{0, 1, 1, 1}}, got.data()).errors()),
             Catch::Contains("is [4, 6] in the checkpoint, [6, 4] in this model"));
  CHECK_THAT(errors_of(c->read("q", {1}, ck::Field::value, {{0, 1, 1, 1}}, got.data()).errors()), Catch::Contains("has no tensor \"q\""));

  // A later checkpoint with keep 1 removes this one; a partial one is never opened.
  auto again = ck::commit(root, 6, {}, {*ck::write_rank(root, 6, 0, {piece(Slice::whole({4, 6}), "w"), piece(Slice::whole({5}), "b")})}, 1);
  REQUIRE(again.ok());
  CHECK(ck::complete_checkpoints(root) == std::vector<std::string>{ck::step_dir(root, 6)});
  REQUIRE(ck::write_rank(root, 8, 0, {piece(Slice::whole({5}), "b")}).ok());
  CHECK(ck::Checkpoint::open(root)->step() == 6);

  // A manifest whose pieces leave part of w uncovered (rank 1's file dropped from it).
  auto r1_only = ck::write_rank(root, 10, 0, {piece(Slice::column_block({4, 6}, 0, 3), "w")});
  REQUIRE(ck::commit(root, 10, {}, {*r1_only}, 0).ok());
  auto missing = ck::Checkpoint::open(root);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(errors_of(missing.errors()), Catch::Contains("tensors.w") && Catch::Contains("no piece holds elements [3, 6)"));
}

TEST_CASE("a manifest whose fields have the wrong types is refused, not thrown on (found by fuzzing)") {
  het::test::TempDir dir;
  const std::string root = dir.path() + "/ck";
  std::vector<float> x{1, 2, 3};
  ck::PieceOut p{"b", {3}, {{0, 3, 3, 1}}, x, x, x};
  auto r0 = ck::write_rank(root, 1, 0, {p});
  REQUIRE(r0.ok());
  REQUIRE(ck::commit(root, 1, {}, {*r0}, 0).ok());
  const std::string manifest = ck::step_dir(root, 1) + "/manifest.json";
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto at = text.find("\"hetexec checkpoint\"");
  REQUIRE(at != std::string::npos);
  std::ofstream(manifest) << text.replace(at, 20, "7");
  auto c = ck::Checkpoint::open(root);
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(errors_of(c.errors()), Catch::Contains("format: is not \"hetexec checkpoint\""));
}

TEST_CASE("a rescue: the survivors' overlapping pieces are read from the nearest holder, at the newest step they hold whole") {
  het::test::TempDir dir;
  const std::string rescue = dir.path() + "/rescue";
  // w [4, 6]: replicas hold it whole or by columns; each holder's values differ by a tag, so
  // what was read tells from whom.
  auto piece = [&](const Slice& s, float tag) {
    ck::PieceOut p{"w", s.shape, ck::spans_of(s, {{0, s.elements()}}), {}, {}, {}};
    for (std::int64_t i = 0; i < s.elements(); ++i) {
      const float x = float(s.global(i)) + tag;
      p.value.push_back(x), p.m.push_back(x), p.v.push_back(x);
    }
    return p;
  };
  const nlohmann::json about{{"seed", 1}};
  const std::map<std::string, std::vector<std::int64_t>> tensors{{"w", {4, 6}}};
  auto distance = [](const std::string& me) {
    return [me](const std::string& from) { return from == me ? 0 : from.substr(0, from.find(':')) == me.substr(0, me.find(':')) ? 1 : 2; };
  };
  // Step 5: columns [0, 3) on a/0:0, the whole on b/0:0 and on a/0:1.
  REQUIRE(ck::write_rescue(rescue, 5, 0, "a/0:0", about, {piece(Slice::column_block({4, 6}, 0, 3), 100)}).ok());
  REQUIRE(ck::write_rescue(rescue, 5, 1, "b/0:0", about, {piece(Slice::whole({4, 6}), 200)}).ok());
  REQUIRE(ck::write_rescue(rescue, 5, 2, "a/0:1", about, {piece(Slice::whole({4, 6}), 300)}).ok());
  // A straggler that stopped one step earlier, with half of w: that step is not whole; and one
  // that went a step further, also with half: the newest whole step is 5.
  REQUIRE(ck::write_rescue(rescue, 4, 3, "c/0:0", about, {piece(Slice::column_block({4, 6}, 3, 3), 400)}).ok());
  REQUIRE(ck::write_rescue(rescue, 6, 4, "c/0:1", about, {piece(Slice::column_block({4, 6}, 0, 3), 500)}).ok());
  // A record that is not one (garbage JSON, a wrong type) is passed over.
  std::ofstream(rescue + "/rank-00009.json") << "{\"step\": 7, \"holder\": \"x/0:0\", \"answer\": {\"file\": \"f\", \"bytes\": 1, \"tensors\": [1]}}";
  std::ofstream(rescue + "/rank-00010.json") << "not json";

  auto c = ck::Checkpoint::open_rescue(rescue, tensors, distance("a/0:0"));
  REQUIRE(c);
  CHECK(c->step() == 5);
  CHECK(c->manifest()["seed"] == 1);
  std::vector<float> got(24);
  REQUIRE(c->read("w", {4, 6}, ck::Field::value, {{0, 24, 24, 1}}, got.data()).ok());
  for (int i = 0; i < 24; ++i) {
    INFO(i);
    CHECK(got[std::size_t(i)] == float(i) + (i % 6 < 3 ? 100 : 300));  // its own columns, the rest from its node
  }
  // Every element read once, from the files of ranks 0 and 2 (files in rank order: 0, 1, 2).
  CHECK(c->elements_read() == std::vector<std::uint64_t>{12, 0, 12});
  CHECK(c->manifest()["holders"] == nlohmann::json{"a/0:0", "b/0:0", "a/0:1"});
  // From b's device: all of it its own.
  auto from_b = ck::Checkpoint::open_rescue(rescue, tensors, distance("b/0:0"));
  REQUIRE(from_b);
  REQUIRE(from_b->read("w", {4, 6}, ck::Field::m, {{0, 24, 24, 1}}, got.data()).ok());
  for (int i = 0; i < 24; ++i) CHECK(got[std::size_t(i)] == float(i) + 200);

  // A tensor no survivor holds: nothing is whole.
  CHECK_FALSE(ck::Checkpoint::open_rescue(rescue, {{"w", {4, 6}}, {"b", {5}}}, distance("a/0:0")));
  // Nothing there at all.
  CHECK_FALSE(ck::Checkpoint::open_rescue(dir.path() + "/none", tensors, distance("a/0:0")));
}
