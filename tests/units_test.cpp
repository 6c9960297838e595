#include <catch2/catch.hpp>

#include "units/units.hpp"

using het::units::Dimension;
using het::units::format;
using het::units::parse;

TEST_CASE("quantities parse with their units into base units") {
  CHECK(parse("40GiB", Dimension::bytes).value == 40.0 * 1024 * 1024 * 1024);
  CHECK(parse("16GB", Dimension::bytes).value == 16e9);
  CHECK(parse("344MiB", Dimension::bytes).value == 344.0 * 1024 * 1024);
  CHECK(parse("300GB/s", Dimension::bandwidth).value == 300e9);
  CHECK(parse("200Gbit/s", Dimension::bandwidth).value == 25e9);
  CHECK(parse("5 Gbps", Dimension::bandwidth).value == 625e6);
  CHECK(parse("0.7GB/s", Dimension::bandwidth).value == Approx(0.7e9));
  CHECK(parse("2us", Dimension::time).value == Approx(2e-6));
  CHECK(parse("1ms", Dimension::time).value == Approx(1e-3));
  CHECK(parse("1.5e2 ns", Dimension::time).value == Approx(150e-9));
  CHECK(parse("312TFLOPS", Dimension::flops).value == 312e12);
  CHECK(parse("1PFLOP/s", Dimension::flops).value == 1e15);
}

TEST_CASE("a bare number is rejected where a unit is needed") {
  auto p = parse("25", Dimension::bandwidth);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error, Catch::Contains("bare number") && Catch::Contains("25Gbit/s"));
}

TEST_CASE("a unit of another dimension is rejected and named") {
  auto p = parse("300GB/s", Dimension::bytes);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error, Catch::Contains("which is a bandwidth"));
  CHECK_THAT(parse("2GiB", Dimension::time).error, Catch::Contains("which is a size"));
}

TEST_CASE("unknown units and non-numbers are rejected") {
  CHECK_THAT(parse("3 parsecs", Dimension::time).error, Catch::Contains("unknown unit 'parsecs'"));
  CHECK_THAT(parse("fast", Dimension::bandwidth).error, Catch::Contains("does not start with a number"));
  CHECK_FALSE(parse("", Dimension::bytes).ok());
  CHECK_FALSE(parse("nan GB", Dimension::bytes).ok());
  CHECK_FALSE(parse("inf GB/s", Dimension::bandwidth).ok());
}

TEST_CASE("format writes text that parses back to the same value") {
  struct Case {
    double value;
    Dimension dim;
    const char* text;
  };
  for (const Case& c : {Case{40.0 * (1 << 30), Dimension::bytes, "40GiB"}, Case{16e9, Dimension::bytes, "16GB"},
                        Case{300e9, Dimension::bandwidth, "300GB/s"}, Case{625e6, Dimension::bandwidth, "5Gbit/s"},
                        Case{2e-6, Dimension::time, "2us"}, Case{1e-3, Dimension::time, "1ms"},
                        Case{312e12, Dimension::flops, "312TFLOPS"}, Case{0, Dimension::time, "0s"}}) {
    CHECK(format(c.value, c.dim) == c.text);
    auto back = parse(format(c.value, c.dim), c.dim);
    REQUIRE(back.ok());
    CHECK(back.value == Approx(c.value).epsilon(1e-15));
  }
  // Awkward values still round-trip to within a rounding error.
  for (double v : {1.0 / 3, 123456.789e9, 7e-9, 1e20}) {
    auto back = parse(format(v, Dimension::bandwidth), Dimension::bandwidth);
    REQUIRE(back.ok());
    CHECK(back.value == Approx(v).epsilon(1e-14));
  }
}

TEST_CASE("prices are US dollars per hour (or second), and nothing else") {
  CHECK(parse("2.21USD/h", Dimension::price).value == Approx(2.21 / 3600));
  CHECK(parse("0.001USD/s", Dimension::price).value == Approx(0.001));
  CHECK(format(2.21 / 3600, Dimension::price) == "2.21USD/h");
  CHECK(format(0.5 / 3600, Dimension::price) == "0.5USD/h");  // below the unit's scale: still USD/h
  CHECK_THAT(parse("2.21", Dimension::price).error, Catch::Contains("bare number") && Catch::Contains("2.21USD/h"));
  CHECK_THAT(parse("2.21USD", Dimension::price).error, Catch::Contains("unknown unit 'USD'"));
  CHECK_THAT(parse("2.21EUR/h", Dimension::price).error, Catch::Contains("unknown unit"));
  CHECK_THAT(parse("2GB", Dimension::price).error, Catch::Contains("which is a size"));
}
