// Feeds: any bytes as a plan (plan.json, hetplan.plan/v1: input::parse, then read_plan with
// the built-in catalog, as `hetplan validate` and the agent read a plan without other files).
// Checks: no crash, hang or unbounded memory; a refusal names the file; an accepted plan goes
// through validate_plan() (what every consumer does next), and write_plan() of it reads back to
// the same plan.
#include "fuzz.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"

using namespace het;

namespace {
// The built-in catalog, parsed once (read-only after the first input).
const PlanSpecs& specs() {
  static const DeviceCatalog catalog = *builtin_catalog();
  static const PlanSpecs s{nullptr, nullptr, &catalog};
  return s;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "plan.json");
  if (!doc) return 0;
  auto plan = read_plan(*doc, specs());
  if (!plan) {
    fuzz::require_explained(plan.errors(), "plan.json");
    return 0;
  }
  for (const auto& d : validate_plan(*plan, "plan.json")) fuzz::require(!d.message.empty(), "a violation says what is wrong");
  fuzz::require_round_trip(
      write_plan(*plan), [](const input::Document& d) { return read_plan(d, specs()); },
      [](const Plan& p) { return write_plan(p); }, "write_plan's text reads back to the same plan");
  return 0;
}
