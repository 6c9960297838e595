#include "show_command.hpp"

#include <fstream>
#include <iostream>

#include "render/render.hpp"
#include "report/report.hpp"

namespace hetplan {

void add_show_options(CLI::App* show, ShowArgs& args) {
  show->add_option("--format", args.format,
                   "text (default: the stage table and summary), svg (a picture of the cluster, the pipelines and "
                   "the simulated timeline) or html (that picture with the tables, one self-contained page)")
      ->check(CLI::IsMember({"text", "svg", "html"}));
  show->add_option("-o,--output", args.output, "write to this file instead of stdout");
}

bool show_needs_trace(const ShowArgs& args) { return args.format != "text"; }

int print_show(const het::predict::Outcome& outcome, const ShowArgs& args) {
  std::string text;
  if (args.format == "svg") text = het::render::svg(outcome);
  else if (args.format == "html") text = het::render::html(outcome);
  else text = het::report::stage_table(outcome) + "\n" + het::report::summary(outcome);
  if (args.output.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(args.output, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << args.output << "\n";
    return 2;
  }
  std::cout << "wrote " << args.output << "\n";
  return 0;
}

}  // namespace hetplan
