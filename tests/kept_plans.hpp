#pragma once
// Plans the tests produce, kept for the schema check: ctest sets HET_TEST_PLANS_DIR for the
// unit and CLI tests, and "schema: every plan ..." (scripts/check-plan-schema.py) validates
// what they kept against docs/plan.schema.json after they ran (tests/CMakeLists.txt). Without
// the variable (a test binary run by hand) nothing is kept.
#include <string>

namespace het::test {

// Keeps a plan's JSON text, named by a hash of it (the same plan is kept once).
void keep_plan(const std::string& plan_json);
// Keeps the plan a command wrote to `path` (nothing when there is no such file).
void keep_plan_file(const std::string& path);

}  // namespace het::test
