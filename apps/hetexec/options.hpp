#pragma once
// Checks of option values that more than one hetexec command takes.
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace het::cli {

// An AdamW learning rate: a finite number in (0, 10] — what an agent accepts
// (agent/agent.cpp). CLI11's PositiveNumber and Range let nan and inf through.
inline CLI::Validator learning_rate() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 10)
          return "must be a number above 0 and at most 10, not " + text;
        return "";
      },
      "in (0, 10]", "learning rate");
}

}  // namespace het::cli
