#pragma once
// `hetplan show PLAN [--format text|svg|html] [-o FILE]`: the output side of `show`. Loading
// and predicting the plan is main.cpp's run_simulate (shared with `simulate`); this prints the
// stage table and summary (text), or the picture of libplan/render (svg, html).
#include <string>

#include <CLI/CLI.hpp>

#include "predict/predict.hpp"

namespace hetplan {

struct ShowArgs {
  std::string format = "text";  // text, svg or html
  std::string output;           // a file; stdout when empty
};

void add_show_options(CLI::App* show, ShowArgs& args);

// Whether the format needs the simulator's trace (predict::Options::trace).
bool show_needs_trace(const ShowArgs& args);

// Writes the outcome in the chosen format. Exit status: 0, or 2 when the output cannot be written.
int print_show(const het::predict::Outcome& outcome, const ShowArgs& args);

}  // namespace hetplan
