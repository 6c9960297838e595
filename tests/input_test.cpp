#include <catch2/catch.hpp>

#include "input/input.hpp"
#include "process.hpp"

using namespace het;
using input::Need;

TEST_CASE("load reports a missing file, an empty file and binary data") {
  test::TempDir dir;
  auto missing = input::load(dir.path() + "/nope.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.errors()[0].message, Catch::Contains("cannot open"));

  auto empty = input::load(dir.write("empty.yaml", "  \n\n"));
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.errors()[0].message, Catch::Contains("empty"));

  auto binary = input::load(dir.write("bin.yaml", std::string("a: 1\n\x00\xff\xfe", 8)));
  REQUIRE_FALSE(binary.ok());
  CHECK(binary.errors()[0].line == 2);
  CHECK_THAT(binary.errors()[0].message, Catch::Contains("not UTF-8 text"));

  auto directory = input::load(dir.path());
  REQUIRE_FALSE(directory.ok());
}

TEST_CASE("syntax errors carry their line") {
  auto d = input::parse("a: 1\nb: [1, 2\nc: 3\n", "f.yaml");
  REQUIRE_FALSE(d.ok());
  CHECK(d.errors()[0].file == "f.yaml");
  CHECK(d.errors()[0].line >= 2);
  CHECK_THAT(d.errors()[0].message, Catch::Contains("syntax error"));
}

TEST_CASE("the top of a document must be a map") {
  auto d = input::parse("- 1\n- 2\n", "f.yaml");
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.errors()[0].message, Catch::Contains("got a list"));
  CHECK_FALSE(input::parse("# only a comment\n", "f.yaml").ok());
}

TEST_CASE("JSON reads as YAML with line numbers") {
  auto d = input::parse("{\n  \"a\": 1,\n  \"b\": \"x\"\n}\n", "f.json");
  REQUIRE(d.ok());
  CHECK(input::line_of(d->root["b"]) == 3);
}

TEST_CASE("Fields rejects unknown and repeated keys, with a hint") {
  auto d = input::parse("name: x\nnmae: y\nname: z\n", "f.yaml");
  REQUIRE(d.ok());
  Diagnostics errors;
  input::Context ctx{"f.yaml", &errors};
  input::Fields f(ctx, d->root, "", {"name", "size"});
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].path == "nmae");
  CHECK(errors[0].line == 2);
  CHECK_THAT(errors[0].message, Catch::Contains("did you mean 'name'"));
  CHECK(errors[1].line == 3);
  CHECK_THAT(errors[1].message, Catch::Contains("given twice"));
}

TEST_CASE("typed getters report missing, mistyped and out-of-range values") {
  auto d = input::parse("n: abc\nm: -3\nq: 25\nl: 1\nx: 1.5\nempty:\n", "f.yaml");
  REQUIRE(d.ok());
  Diagnostics errors;
  input::Context ctx{"f.yaml", &errors};
  input::Fields f(ctx, d->root, "top", {"n", "m", "q", "l", "x", "empty", "missing"});
  CHECK_FALSE(f.integer("n", Need::required));
  CHECK_FALSE(f.integer("m", Need::required));
  CHECK_FALSE(f.quantity("q", units::Dimension::bandwidth, Need::required));
  CHECK_FALSE(f.list("l", Need::required));
  CHECK_FALSE(f.integer("x", Need::required));
  CHECK_FALSE(f.string("empty", Need::required));
  CHECK_FALSE(f.integer("missing", Need::required));
  CHECK_FALSE(f.integer("missing", Need::optional));  // absent and optional: no report
  REQUIRE(errors.size() == 7);
  CHECK(errors[0].path == "top.n");
  CHECK(errors[0].line == 1);
  CHECK_THAT(errors[1].message, Catch::Contains("at least 1"));
  CHECK_THAT(errors[2].message, Catch::Contains("bare number"));
  CHECK_THAT(errors[3].message, Catch::Contains("expected a list"));
  CHECK_THAT(errors[4].message, Catch::Contains("whole number"));
  CHECK_THAT(errors[5].message, Catch::Contains("got nothing"));
  CHECK(errors[6].path == "top.missing");
  CHECK_THAT(errors[6].message, Catch::Contains("missing required field"));
}

TEST_CASE("diagnostics print as file:line:column: path: message") {
  Diagnostic d{"c.yaml", 7, 5, "subclusters[1].nodes", "expected a whole number"};
  CHECK(d.to_string() == "c.yaml:7:5: subclusters[1].nodes: expected a whole number");
  CHECK(Diagnostic{"c.yaml", 0, 0, "", "empty"}.to_string() == "c.yaml: empty");
}

TEST_CASE("to_json keeps every scalar's text, so the JSON reads back as the YAML did") {
  const char* yaml = R"(a: 2048
b: 1.5
c: 400us
d: "7"
e: true
f: ~
g: 1e3
h: 1.50
i: 007
j: [1, 2.25, x]
k: {nested: -3}
)";
  auto d = input::parse(yaml, "p.yaml");
  REQUIRE(d.ok());
  const auto j = input::to_json(d->root);
  CHECK(j.dump() == R"({"a":2048,"b":1.5,"c":"400us","d":"7","e":true,"f":null,"g":"1e3","h":"1.50","i":"007",)"
                     R"("j":[1,2.25,"x"],"k":{"nested":-3}})");
  auto back = input::parse(j.dump(), "p.json");
  REQUIRE(back.ok());
  for (const char* key : {"a", "b", "c", "d", "e", "g", "h", "i"})
    CHECK(back->root[key].Scalar() == d->root[key].Scalar());
  CHECK(back->root["f"].IsNull());
  CHECK(back->root["j"][1].Scalar() == "2.25");
}
