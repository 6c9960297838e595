#pragma once
// What went wrong, or "" when it did not: for tests that gather the errors of many ranks.
#include <string>

#include "diag/diag.hpp"

namespace het::test {

inline std::string error_text(const Result<Done>& done) { return done ? "" : to_string(done.errors()); }

}  // namespace het::test
