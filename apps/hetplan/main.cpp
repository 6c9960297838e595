// hetplan: the planner's command line. Argument parsing and output formatting only; the
// work is done in libplan. Exit status: 0 success, 2 invalid input or usage; diff and check
// (review_commands.cpp) also 1: the plans differ, a rule is violated.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "het/version.hpp"
#include "importer/importer.hpp"
#include "input/input.hpp"
#include "plan/plan_io.hpp"
#include "plan/profiles.hpp"
#include "fidelity/fidelity.hpp"
#include "plan/validate.hpp"
#include "predict/predict.hpp"
#include "replan/replan.hpp"
#include "report/report.hpp"
#include "calibrate_command.hpp"
#include "review_commands.hpp"
#include "search/objective.hpp"
#include "search/search.hpp"
#include "search/lengths.hpp"
#include "show_command.hpp"
#include "spec/cluster.hpp"
#include "spec/hf_config.hpp"
#include "spec/model.hpp"
#include "spec/profile.hpp"
#include "sim/sim.hpp"
#include "units/units.hpp"
#include "sweep/report.hpp"
#include "sweep/vary.hpp"
#include "validation/inputs.hpp"

namespace {

constexpr int kInvalid = 2;

nlohmann::ordered_json report_json(const het::InputsReport& report) {
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  auto diagnostics = [](const het::Diagnostics& list) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& e : list)
      out.push_back({{"file", e.file}, {"line", e.line}, {"column", e.column}, {"path", e.path},
                     {"message", e.message}, {"text", e.to_string()}});
    return out;
  };
  for (const auto& c : report.inputs)
    inputs.push_back({{"kind", c.kind}, {"file", c.file}, {"valid", c.errors.empty()}, {"summary", c.summary},
                      {"assumptions", c.assumptions}, {"errors", diagnostics(c.errors)}, {"warnings", diagnostics(c.warnings)}});
  return {{"valid", report.ok()}, {"inputs", inputs}};
}

int run_validate(const het::InputFiles& files, const std::string& format) {
  if (!files.model && !files.cluster && !files.plan && files.profiles.empty() && !files.catalog) {
    std::cerr << "hetplan validate: nothing to check; give --model, --cluster, --profile, --plan or --catalog\n";
    return kInvalid;
  }
  het::InputsReport report = het::check_inputs(files);
  if (format == "json") {
    std::cout << report_json(report).dump(2) << "\n";
    return report.ok() ? 0 : kInvalid;
  }
  std::size_t width = 0;
  for (const auto& c : report.inputs) width = std::max(width, c.file.size());
  for (const auto& c : report.inputs) {
    std::string kind = c.kind + std::string(8 - std::min<std::size_t>(8, c.kind.size()), ' ');
    std::string file = c.file + std::string(width - c.file.size(), ' ');
    if (c.errors.empty()) {
      std::cout << kind << file << "  ok       " << c.summary << "\n";
      for (const auto& a : c.assumptions) std::cout << std::string(kind.size() + file.size() + 11, ' ') << "assumes: " << a << "\n";
      for (const auto& w : c.warnings) std::cerr << "warning: " << w.to_string() << "\n";
    } else {
      std::cout << kind << file << "  INVALID  " << c.errors.size() << " problem" << (c.errors.size() == 1 ? "" : "s")
                << "\n";
      for (const auto& e : c.errors) std::cerr << "error: " << e.to_string() << "\n";
    }
  }
  return report.ok() ? 0 : kInvalid;
}

void print_errors(const het::Diagnostics& errors) {
  for (const auto& e : errors) std::cerr << "error: " << e.to_string() << "\n";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << path << "\n";
    return false;
  }
  return true;
}

// The sentences about a plan's profiles: replaced or not used, then unavailable.
std::vector<std::string> profile_notes(const het::ProfileChoice& profiles) {
  std::vector<std::string> notes = profiles.notes;
  for (const auto& p : profiles.unavailable) notes.push_back(het::unavailable_sentence(p));
  return notes;
}

struct SimulateArgs {
  het::InputFiles files;
  std::string schedule, format = "table", output, trace, resharding = "cheapest";
  bool overlap_sync = false;
  bool assign_lengths = false;          // simulate: re-deal the sequence-length buckets over the pipelines first
  std::optional<double> time_dilation;  // predicting a run-local/submit run with emulated links, dilated so
  std::string measured, side_by_side;  // simulate: a measured trace to compare with; the combined trace
};

// simulate and show: load, validate, predict; print a table or the completed plan (simulate),
// or what `show` was asked for.
int run_simulate(const SimulateArgs& a, const hetplan::ShowArgs* show) {
  auto loaded = het::load_plan_inputs(a.files);
  if (!loaded) {
    print_errors(loaded.errors());
    return kInvalid;
  }
  het::predict::Options opt;
  if (!a.schedule.empty()) {
    for (auto k : {het::ScheduleKind::gpipe, het::ScheduleKind::one_f_one_b, het::ScheduleKind::eager_1f1b,
                   het::ScheduleKind::h_1f1b, het::ScheduleKind::virtual_1f1b})
      if (a.schedule == het::to_string(k)) opt.schedule = k;
  }
  if (a.resharding != "cheapest") opt.resharding = het::parse_resharding(a.resharding);
  opt.overlap_sync = a.overlap_sync;
  opt.trace = !a.trace.empty() || !a.side_by_side.empty() || (show && hetplan::show_needs_trace(*show));
  // A time-dilated run (hetexec run-local --time-dilation X): its slower devices and links.
  std::vector<het::ProfileSpec> profiles = loaded->profiles.specs();
  if (a.time_dilation) het::fidelity::emulated_run(loaded->plan, profiles, *a.time_dilation);
  std::vector<het::sim::TraceEvent> measured;
  if (!a.measured.empty()) {
    auto read = het::fidelity::read_chrome_trace(a.measured);
    if (!read) {
      print_errors(read.errors());
      return kInvalid;
    }
    measured = std::move(*read);
  }
  het::cost::ComputeModel compute(loaded->plan.model, profiles);
  auto outcome = het::predict::predict(loaded->plan, compute, opt);
  if (!outcome) {
    print_errors(outcome.errors());
    return kInvalid;
  }
  if (a.assign_lengths) {
    auto assigned = het::search::assign_lengths(loaded->plan, compute, opt);
    if (!assigned) {
      print_errors(assigned.errors());
      return kInvalid;
    }
    outcome = std::move(assigned->outcome);
    outcome->notes.insert(outcome->notes.begin(),
                          "sequence lengths assigned: " + std::to_string(assigned->swaps) + " swaps of micro-batches between pipelines (" +
                              std::to_string(assigned->predictions) + " predictions), the iteration " +
                              het::report::fmt("%.4g", assigned->before_s) + " s -> " +
                              het::report::fmt("%.4g", outcome->plan.predicted->iteration_s) + " s");
  }
  // What the profiles mean for this prediction comes first among the notes, which the
  // summary and the pictures show (on stderr where stdout is the plan's JSON).
  std::vector<std::string> notes = profile_notes(loaded->profiles);
  outcome->notes.insert(outcome->notes.begin(), notes.begin(), notes.end());
  if (a.format == "json" && !show)
    for (const auto& n : notes) std::cerr << "note: " << n << "\n";
  if (!a.trace.empty() && !write_file(a.trace, het::sim::chrome_trace(outcome->sim.trace))) return kInvalid;
  if (!a.measured.empty()) {  // predicted beside measured, instead of the prediction alone
    auto compared = het::fidelity::compare(*outcome, measured);
    if (!compared) {
      for (auto e : compared.errors()) e.file = a.measured, std::cerr << "error: " << e.to_string() << "\n";
      return kInvalid;
    }
    if (!a.side_by_side.empty() && !write_file(a.side_by_side, het::fidelity::side_by_side_trace(outcome->sim.trace, measured)))
      return kInvalid;
    if (a.format == "json") std::cout << het::fidelity::to_json(*compared).dump(2) << "\n";
    else std::cout << het::fidelity::table(*compared);
    return 0;
  }
  const std::string plan_json = het::write_plan(outcome->plan);
  if (!a.output.empty() && !write_file(a.output, plan_json)) return kInvalid;
  if (show) return hetplan::print_show(*outcome, *show);
  if (a.format == "json") {
    std::cout << plan_json;
  } else {
    std::cout << het::report::stage_table(*outcome) << "\n" << het::report::summary(*outcome);
  }
  return 0;
}

struct SearchArgs {
  std::string model, cluster, algo = "auto", schedule = "auto", output, format = "table", granularity = "layer";
  std::vector<std::string> profiles, algos;
  std::optional<std::string> catalog, training;
  double time_budget = 0, mcts_lambda = 10;
  std::int64_t mcts_iterations = 0, mcts_patience = 256;
  int threads = 0, top = 1;
  int write_top = 0;  // also write the plans ranked 1..N as OUTPUT-STEM.K.plan.json
  std::uint64_t seed = 1;
  double memory_headroom = 0.05;  // of each device's usable memory, kept free (issue 17)
  std::string objective = "time";  // time or cost (issue 22)
  std::string max_cost_per_hour;   // a price, e.g. 100USD/h
  double max_iteration_s = 0;      // 0: none
  bool pareto = false;
};

struct SearchInputs {
  het::ModelSpec model;
  het::ClusterSpec cluster;
  het::ProfileChoice profiles;  // the plans record profiles.used
};

het::Result<SearchInputs> load_search_inputs(const SearchArgs& a) {
  het::Diagnostics errors;
  het::Plan shell;  // the model and cluster, for choosing the profiles
  auto catalog = a.catalog ? het::load_catalog(*a.catalog) : het::builtin_catalog();
  if (!catalog) return catalog.errors();
  if (auto m = het::load_model(a.model, a.training)) shell.model = *m;
  else errors.insert(errors.end(), m.errors().begin(), m.errors().end());
  if (auto c = het::load_cluster(a.cluster, *catalog)) shell.cluster = *c;
  else errors.insert(errors.end(), c.errors().begin(), c.errors().end());
  std::vector<het::ProfileFile> given;
  for (const auto& f : a.profiles) {
    if (auto p = het::load_profile_file(f)) given.push_back(std::move(*p));
    else errors.insert(errors.end(), p.errors().begin(), p.errors().end());
  }
  if (!errors.empty()) return errors;
  auto profiles = het::choose_profiles(shell, given, "the model (" + a.model + ")");
  if (!profiles) return profiles.errors();
  return SearchInputs{std::move(shell.model), std::move(shell.cluster), std::move(*profiles)};
}

het::search::Options search_options(const SearchArgs& a) {
  het::search::Options o;
  o.time_budget_s = a.time_budget;
  o.threads = a.threads;
  o.seed = a.seed;
  o.mcts_lambda = a.mcts_lambda;
  o.mcts_iterations = a.mcts_iterations;
  o.mcts_patience = a.mcts_patience;
  o.top_k = std::max(16, a.top);
  o.predict.memory_headroom = a.memory_headroom;
  o.granularity = a.granularity == "sublayer" ? het::Granularity::sublayer : het::Granularity::layer;
  if (a.schedule != "auto")
    for (auto k : {het::ScheduleKind::gpipe, het::ScheduleKind::one_f_one_b, het::ScheduleKind::eager_1f1b,
                   het::ScheduleKind::h_1f1b, het::ScheduleKind::virtual_1f1b})
      if (a.schedule == het::to_string(k)) o.schedules = {k};
  // Progress for people on stderr once a search has run for a second: one line rewritten in
  // place on a terminal, a line every few seconds in a log.
  auto start = std::chrono::steady_clock::now();
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(start);
  const bool tty = isatty(2);
  o.progress = [start, last, tty](const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start < std::chrono::seconds(1) || (!tty && now - *last < std::chrono::seconds(5))) return;
    *last = now;
    const int elapsed = static_cast<int>(std::chrono::duration<double>(now - start).count());
    if (tty) std::cerr << "\r\033[Ksearch " << elapsed << " s: " << line << std::flush;
    else std::cerr << "search " << elapsed << " s: " << line << "\n";
  };
  return o;
}

using het::report::fmt;

// The search `hetplan search` runs, on `cluster`: its best plan first, carrying the profiles it
// was costed with and their notes. Errors are printed (nullopt then).
std::optional<het::search::SearchOutput> search_on(const het::ModelSpec& model, const het::ClusterSpec& cluster,
                                                   const het::ProfileChoice& profiles, const SearchArgs& a) {
  het::cost::ComputeModel compute(model, profiles.specs());
  auto out = het::search::run(a.algo, model, cluster, compute, search_options(a));
  if (isatty(2)) std::cerr << "\r\033[K" << std::flush;
  if (!out) {
    print_errors(out.errors());
    return std::nullopt;
  }
  auto& best = out->plans.front();
  best.plan.profiles = profiles.used;
  best.notes.insert(best.notes.begin(), profiles.notes.begin(), profiles.notes.end());
  return std::move(*out);
}

// `hetplan search --objective cost | --max-cost-per-hour X | --max-iteration-s Y | --pareto`:
// the search on every subset of the subclusters (search/objective.hpp).
int run_objective_search(const SearchArgs& a, const SearchInputs& in) {
  het::search::Constraints limits;
  if (!a.max_cost_per_hour.empty()) {
    auto price = het::units::parse(a.max_cost_per_hour, het::units::Dimension::price);
    if (!price.ok() || price.value <= 0) {
      std::cerr << "error: --max-cost-per-hour: " << (price.ok() ? "expected a price above 0" : price.error) << "\n";
      return kInvalid;
    }
    limits.max_cost_per_hour = price.value * 3600;
  }
  if (a.max_iteration_s > 0) limits.max_iteration_s = a.max_iteration_s;
  het::cost::ComputeModel compute(in.model, in.profiles.specs());
  auto out = het::search::run_objective(a.algo, in.model, in.cluster, compute, search_options(a),
                                        a.objective == "cost" ? het::search::Objective::cost : het::search::Objective::time, limits);
  if (isatty(2)) std::cerr << "\r\033[K" << std::flush;
  if (!out) {
    print_errors(out.errors());
    return kInvalid;
  }
  auto& best = out->best;
  best.plan.profiles = in.profiles.used;
  const std::string text = het::write_plan(best.plan);
  if (!a.output.empty() && !write_file(a.output, text)) return kInvalid;
  if (a.format == "json") {
    if (!a.pareto) {
      std::cout << text;
      return 0;
    }
    nlohmann::ordered_json j = {{"objective", a.objective}, {"unused_subclusters", out->unused},
                                {"best", het::sweep::point_json(best.plan)}, {"pareto", nlohmann::ordered_json::array()}};
    for (const auto& o : out->pareto) j["pareto"].push_back(het::sweep::point_json(o.plan));
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << het::report::stage_table(best) << "\n" << het::report::summary(best) << "\n";
  std::cout << "objective " << a.objective << ": the best of " << out->points << " plans found by " << out->searches
            << " searches (of every combination of none, a quarter, half or all of each subcluster's nodes; with more than 3 subclusters none or all), in " << fmt("%.1f s", out->seconds) << "\n";
  std::string unused;
  for (const auto& u : out->unused) unused += (unused.empty() ? "" : ", ") + u;
  if (!unused.empty()) std::cout << "unused subclusters: " << unused << "\n";
  if (a.pareto) {
    std::cout << "\ntime/cost front (no plan is both faster and cheaper per token than one of these):\n"
              << "iteration_s     tokens/s      USD/h  USD/Mtoken  devices  plan\n";
    for (const auto& o : out->pareto) {
      const auto& p = *o.plan.predicted;
      std::cout << fmt("%11.4f", p.iteration_s) << "  " << fmt("%11.0f", p.tokens_per_s) << "  "
                << fmt("%9.2f", p.cost_usd_per_hour.value_or(0)) << "  " << fmt("%10.4f", p.usd_per_million_tokens.value_or(0)) << "  "
                << fmt("%7.0f", het::sweep::devices_used(o.plan)) << "  " << het::sweep::shape_of(o.plan) << "\n";
    }
  }
  if (!a.output.empty()) std::cout << "wrote " << a.output << "\n";
  return 0;
}

// What a plan computes where, for --write-top: per stage its subcluster, units, tp, cp and
// recompute, with the replicas of each summed over pipelines. Plans of one shape differ only in
// how those replicas are grouped into pipelines, the micro-batching, which devices of a
// subcluster they take, the schedule and its warm-ups: tunings of one layout, of which the best
// is kept. On the ranking bench's clusters the model priced such variants within 0.1% of each
// other (docs/executor.md "Does the ranking hold?"), below what a measurement can order.
std::map<std::vector<int>, int> plan_shape(const het::Plan& p) {
  std::map<std::vector<int>, int> replicas;
  for (const het::Pipeline& q : p.pipelines)
    for (const het::Stage& st : q.stages)
      replicas[{p.cluster.index_of(st.subcluster), st.first, st.last, st.tp, st.cp, static_cast<int>(st.recompute)}] +=
          st.dp;
  return replicas;
}

int run_search(const SearchArgs& a) {
  if (a.write_top > 0 && a.output.empty()) {
    std::cerr << "error: --write-top writes next to the plan of -o/--output; give -o\n";
    return kInvalid;
  }
  auto in = load_search_inputs(a);
  if (!in) {
    print_errors(in.errors());
    return kInvalid;
  }
  if (a.objective != "time" || !a.max_cost_per_hour.empty() || a.max_iteration_s > 0 || a.pareto) {
    if (a.write_top > 0) {
      std::cerr << "error: --write-top is for a search for time alone (no --objective cost, constraints or --pareto)\n";
      return kInvalid;
    }
    return run_objective_search(a, *in);
  }
  auto out = search_on(in->model, in->cluster, in->profiles, a);
  if (!out) return kInvalid;
  auto& best = out->plans.front();
  const std::string text = het::write_plan(best.plan);
  if (!a.output.empty() && !write_file(a.output, text)) return kInvalid;
  if (a.write_top > 0) {  // the best plans in the search's order (its prediction), for measuring the ranking
    std::string stem = a.output;
    for (const char* ext : {".plan.json", ".json"})
      if (stem.size() > std::strlen(ext) && stem.compare(stem.size() - std::strlen(ext), std::string::npos, ext) == 0) {
        stem.resize(stem.size() - std::strlen(ext));
        break;
      }
    std::set<std::map<std::vector<int>, int>> shapes;  // the best plan of each of the N best shapes
    for (std::size_t k = 0; k < out->plans.size() && int(shapes.size()) < a.write_top; ++k) {
      auto plan = out->plans[k].plan;
      if (!shapes.insert(plan_shape(plan)).second) continue;
      plan.profiles = in->profiles.used;
      if (!write_file(stem + "." + std::to_string(shapes.size()) + ".plan.json", het::write_plan(plan))) return kInvalid;
    }
  }
  if (a.format == "json") {
    std::cout << text;
    return 0;
  }
  std::cout << het::report::stage_table(best) << "\n" << het::report::summary(best) << "\n";
  std::cout << "algorithm    iteration_s  vs_best  seconds  layouts  note\n";
  for (const auto& r : out->algorithms)
    std::cout << r.name << std::string(13 - std::min<std::size_t>(12, r.name.size()), ' ')
              << (r.iteration_s ? fmt("%11.4f", *r.iteration_s) : std::string("          -")) << "  "
              << (r.iteration_s ? fmt("%6.3fx", *r.iteration_s / best.plan.predicted->iteration_s) : std::string("      -"))
              << "  " << fmt("%7.2f", r.seconds) << "  " << fmt("%7.0f", double(r.candidates)) << "  "
              << (r.timed_out ? "time budget reached; " : "") << r.note << "\n";
  std::cout << "lower bound  " << fmt("%11.4f", out->lower_bound_s) << " s (no plan of identical pipelines is faster: search/algorithms.hpp); gap "
            << fmt("%.1f %%", 100 * best.plan.algorithm->gap) << "\n";
  if (!a.output.empty()) std::cout << "wrote " << a.output << "\n";
  return 0;
}

// `hetplan replan PLAN (--without SUB/NODE[:DEVICE]... | --cluster NEW.yaml)`: the best plan for
// the devices left (or the new cluster), searched as `hetplan search` does, and the switch to it
// from PLAN (libplan/replan).
struct ReplanArgs {
  std::string plan, new_cluster;
  std::optional<std::string> model, old_cluster;  // for a plan that does not embed them
  std::vector<std::string> without;
};
int run_replan(const ReplanArgs& r, const SearchArgs& a) {
  if (r.without.empty() == r.new_cluster.empty()) {
    std::cerr << "error: give the devices lost (--without SUB/NODE[:DEVICE], repeatable) or the new cluster (--cluster), one of them\n";
    return kInvalid;
  }
  het::InputFiles files;
  files.plan = r.plan, files.profiles = a.profiles, files.catalog = a.catalog;
  files.model = r.model, files.cluster = r.old_cluster;
  auto loaded = het::load_plan_inputs(files);
  if (!loaded) {
    auto errors = loaded.errors();
    for (auto& e : errors)  // here --cluster names the new cluster
      if (auto at = e.message.find("give one with --cluster"); at != std::string::npos)
        e.message.replace(at, std::strlen("give one with --cluster"), "give one with --old-cluster");
    print_errors(errors);
    return kInvalid;
  }
  const het::Plan& old = loaded->plan;
  het::Result<het::replan::Reduced> reduced = het::replan::Reduced{};
  if (!r.without.empty()) {
    reduced = het::replan::without(old.cluster, r.without);
  } else {
    auto catalog = a.catalog ? het::load_catalog(*a.catalog) : het::builtin_catalog();
    if (!catalog) {
      print_errors(catalog.errors());
      return kInvalid;
    }
    auto c = het::load_cluster(r.new_cluster, *catalog);
    if (!c) {
      print_errors(c.errors());
      return kInvalid;
    }
    reduced = het::replan::matched(old.cluster, *c);
  }
  if (!reduced) {
    print_errors(reduced.errors());
    return kInvalid;
  }
  auto out = search_on(old.model, reduced->cluster, loaded->profiles, a);
  if (!out) return kInvalid;
  auto& best = out->plans.front();
  if (auto problems = het::validate_plan(best.plan, "the new plan"); !problems.empty()) {
    print_errors(problems);
    std::cerr << "error: internal: the searched plan does not validate on the new cluster\n";
    return 1;
  }
  auto sw = het::replan::switch_between(old, best.plan, *reduced);
  if (!sw) {
    print_errors(sw.errors());
    return kInvalid;
  }
  const std::string text = het::write_plan(best.plan);
  if (!a.output.empty() && !write_file(a.output, text)) return kInvalid;
  if (a.format == "json") {
    nlohmann::ordered_json j;
    j["old_iteration_s"] = old.predicted ? nlohmann::ordered_json(old.predicted->iteration_s) : nlohmann::ordered_json();
    j["new_iteration_s"] = best.plan.predicted->iteration_s;
    j["switch"] = het::replan::to_json(*sw);
    j["plan"] = nlohmann::ordered_json::parse(text);
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << het::report::stage_table(best) << "\n" << het::report::summary(best) << "\n";
  if (old.predicted)
    std::cout << "iteration: " << fmt("%.4f", old.predicted->iteration_s) << " s before, " << fmt("%.4f", best.plan.predicted->iteration_s)
              << " s on the new cluster\n";
  std::cout << het::replan::table(*sw);
  if (!a.output.empty()) std::cout << "wrote " << a.output << "\n";
  return 0;
}

int run_compare(const SearchArgs& a) {
  auto in = load_search_inputs(a);
  if (!in) {
    print_errors(in.errors());
    return kInvalid;
  }
  het::cost::ComputeModel compute(in->model, in->profiles.specs());
  std::vector<std::string> algos = a.algos.empty() ? std::vector<std::string>{"uniform", "heteroauto", "hapt", "mcts", "hexiscale", "auto"} : a.algos;
  struct Row {
    std::string name;
    std::optional<double> t;
    double tokens = 0, mfu = 0, seconds = 0;
    std::string note;
  };
  std::vector<Row> rows;
  std::optional<double> uniform;
  for (const auto& algo : algos) {
    auto out = het::search::run(algo, in->model, in->cluster, compute, search_options(a));
    Row r{algo, std::nullopt, 0, 0, 0, ""};
    if (!out) {
      r.note = out.errors().front().message;
    } else {
      const auto& p = *out->plans.front().plan.predicted;
      r.t = p.iteration_s, r.tokens = p.tokens_per_s, r.mfu = p.mfu, r.seconds = out->seconds;
    }
    if (algo == "uniform") uniform = r.t;
    rows.push_back(r);
  }
  if (a.format == "json") {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      j.push_back({{"algorithm", r.name}, {"iteration_s", r.t ? nlohmann::ordered_json(*r.t) : nlohmann::ordered_json()},
                   {"tokens_per_s", r.tokens}, {"mfu", r.mfu}, {"speedup_over_uniform", uniform && r.t ? *uniform / *r.t : 0.0},
                   {"search_s", r.seconds}, {"note", r.note}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "algorithm    iteration_s     tokens/s    MFU  vs_uniform  search_s\n";
  for (const auto& r : rows) {
    std::cout << r.name << std::string(13 - std::min<std::size_t>(12, r.name.size()), ' ');
    if (!r.t) {
      std::cout << "          -  " << r.note << "\n";
      continue;
    }
    std::cout << fmt("%11.4f", *r.t) << "  " << fmt("%11.0f", r.tokens) << "  " << fmt("%4.1f%%", 100 * r.mfu) << "  "
              << (uniform ? fmt("%9.2fx", *uniform / *r.t) : std::string("        -")) << "  " << fmt("%8.2f", r.seconds)
              << "\n";
  }
  return 0;
}

// `hetplan sweep --vary PATH=VALUES` (issue 22): the best plan at every value of one field
// of the model or the cluster (libplan/sweep). Every point is read and checked before any is
// searched, so a bad value costs no search; a point where no plan fits is a row that says
// why, not a failure.
struct SweepArgs {
  std::string vary, svg;
  bool cold = false;  // --no-warm-start: each point searched as a one-off search would
};
int run_sweep(const SweepArgs& s, const SearchArgs& a) {
  auto vary = het::sweep::parse_vary(s.vary);
  if (!vary) {
    print_errors(vary.errors());
    return kInvalid;
  }
  auto catalog = a.catalog ? het::load_catalog(*a.catalog) : het::builtin_catalog();
  if (!catalog) {
    print_errors(catalog.errors());
    return kInvalid;
  }
  het::Diagnostics errors;
  std::optional<het::input::Document> model_doc;  // none for a Hugging Face config
  std::optional<het::ModelSpec> fixed_model;
  if (het::is_hf_config(a.model)) {
    if (auto m = het::load_model(a.model, a.training)) fixed_model = *m;
    else errors.insert(errors.end(), m.errors().begin(), m.errors().end());
  } else if (a.training) {
    errors.push_back({a.model, 0, 0, "", "--training is for a Hugging Face config.json; a model YAML has its own training fields"});
  } else if (auto d = het::input::load(a.model)) {
    model_doc = std::move(*d);
  } else {
    errors.insert(errors.end(), d.errors().begin(), d.errors().end());
  }
  auto cluster_doc = het::input::load(a.cluster);
  if (!cluster_doc) errors.insert(errors.end(), cluster_doc.errors().begin(), cluster_doc.errors().end());
  std::vector<het::ProfileFile> given;
  for (const auto& f : a.profiles) {
    if (auto p = het::load_profile_file(f)) given.push_back(std::move(*p));
    else errors.insert(errors.end(), p.errors().begin(), p.errors().end());
  }
  if (!errors.empty()) {
    print_errors(errors);
    return kInvalid;
  }
  auto target = het::sweep::target_of(*vary, model_doc ? &model_doc->root : nullptr, cluster_doc->root);
  if (!target) {
    print_errors(target.errors());
    return kInvalid;
  }
  // Every point read and checked first.
  struct Point {
    het::Plan shell;  // its model and cluster
    het::ProfileChoice profiles;
  };
  std::vector<Point> points;
  for (const std::string& value : vary->values) {
    het::Diagnostics bad;
    Point pt;
    const bool in_model = *target == het::sweep::Target::model;
    const het::input::Document& doc = in_model ? *model_doc : *cluster_doc;
    auto changed = het::sweep::apply(doc.root, doc.file, vary->path, value);
    if (!changed) {
      print_errors(changed.errors());
      return kInvalid;
    }
    auto model = in_model ? het::read_model(doc.file, *changed, "")
                 : fixed_model ? het::Result<het::ModelSpec>(*fixed_model) : het::read_model(model_doc->file, model_doc->root, "");
    auto cluster = het::read_cluster(cluster_doc->file, in_model ? cluster_doc->root : *changed, "", *catalog);
    if (model) pt.shell.model = *model;
    else bad.insert(bad.end(), model.errors().begin(), model.errors().end());
    if (cluster) pt.shell.cluster = *cluster;
    else bad.insert(bad.end(), cluster.errors().begin(), cluster.errors().end());
    if (bad.empty()) {
      auto profiles = het::choose_profiles(pt.shell, given, "the model (" + a.model + ")");
      if (profiles) pt.profiles = std::move(*profiles);
      else bad = profiles.errors();
    }
    if (!bad.empty()) {
      std::cerr << "error: with " << vary->path << "=" << value << ":\n";
      print_errors(bad);
      return kInvalid;
    }
    points.push_back(std::move(pt));
  }
  std::vector<het::sweep::Row> rows;
  constexpr std::size_t kWarmPlans = 4;  // as many as the refinement takes from the portfolio's best (search.cpp gather)
  std::vector<het::Plan> before;  // the point before's best plans: they seed this point's search (auto)
  for (std::size_t k = 0; k < points.size(); ++k) {
    const Point& pt = points[k];
    std::cerr << "sweep " << k + 1 << "/" << points.size() << ": " << vary->path << "=" << vary->values[k] << "\n";
    het::sweep::Row row;
    row.value = vary->values[k];
    if (!vary->numbers.empty()) row.number = vary->numbers[k];
    het::cost::ComputeModel compute(pt.shell.model, pt.profiles.specs());
    const auto t0 = std::chrono::steady_clock::now();
    het::search::Options o = search_options(a);
    if (!s.cold) o.warm_start = std::move(before);
    auto out = het::search::run(a.algo, pt.shell.model, pt.shell.cluster, compute, o);
    before.clear();
    if (out)
      for (std::size_t i = 0; i < out->plans.size() && i < kWarmPlans; ++i) before.push_back(out->plans[i].plan);
    if (isatty(2)) std::cerr << "\r\033[K" << std::flush;
    row.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (out) {
      row.plan = std::move(out->plans.front().plan);
      row.plan->profiles = pt.profiles.used;
    } else {
      row.error = out.errors().front().message;
    }
    rows.push_back(std::move(row));
  }
  const std::string title = points.front().shell.model.name + " on " + points.front().shell.cluster.name;
  if (!s.svg.empty() && !write_file(s.svg, het::sweep::svg(*vary, rows, title))) return kInvalid;
  if (a.format == "json") std::cout << het::sweep::to_json(*vary, rows).dump(2) << "\n";
  else std::cout << het::sweep::table(*vary, rows);
  if (!s.svg.empty() && a.format != "json") std::cout << "wrote " << s.svg << "\n";
  return 0;
}

struct ImportArgs {
  std::string from, dir, model, output;
  std::optional<std::string> device, llm_info, training;
};

int run_import(const ImportArgs& a) {
  auto model = het::load_model(a.model, a.training);
  if (!model) {
    print_errors(model.errors());
    return kInvalid;
  }
  het::importer::Options o{a.from, a.dir, *model, a.device, a.llm_info, a.model};
  auto profile = het::importer::import_profile(o);
  if (!profile) {
    print_errors(profile.errors());
    return kInvalid;
  }
  // How it was made, for whoever reads the profile.
  std::string header = "Imported by `hetplan profile import --from " + a.from + " " + a.dir + " --model " + a.model +
                       (a.llm_info ? " --llm-info " + *a.llm_info : "") + "`, for " + model->name + ".\n" +
                       "Times per micro-batch; optimizer_step per layer's parameters (the peer data spreads the step "
                       "evenly over the layers).";
  if (std::any_of(profile->units.begin(), profile->units.end(), [](const auto& r) { return r.parameter_memory; }))
    header += "\nMemory at " + std::to_string(het::dtype_bytes(model->dtype)) + " bytes a value (" +
              het::to_string(model->dtype) + ", the model's dtype).";
  header += a.from == "sailor" ? "\nSource: Sailor (eth-easl/sailor), MIT licence."
                               : "\nSource: the Metis-format files Sailor (eth-easl/sailor) wrote from its measurements, MIT licence.";
  const std::string text = het::write_profile(*profile, header);
  // What we write must read back: the importer's output goes through the same checks.
  auto doc = het::input::parse(text, a.output);
  auto reread = doc ? het::read_profile(*doc) : het::Result<het::ProfileSpec>(doc.errors());
  if (!reread) {
    print_errors(reread.errors());
    std::cerr << "error: internal: the imported profile does not read back\n";
    return 1;
  }
  if (!write_file(a.output, text)) return kInvalid;
  std::cout << "wrote " << a.output << ": " << profile->device << ", " << profile->units.size() << " rows\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // CLI::NonNegativeNumber names its range up to the largest double; this says it in words.
  const CLI::Validator not_negative(
      [](const std::string& v) {
        double x = 0;
        return CLI::detail::lexical_cast(v, x) && x >= 0 ? std::string() : "expected a number >= 0, got '" + v + "'";
      },
      "NUMBER >= 0");
  CLI::App app{"hetplan: hybrid-parallel training plans for heterogeneous GPU clusters"};
  app.set_version_flag("--version", std::string("hetplan ") + het::kVersion);
  app.require_subcommand(1);

  het::InputFiles files;
  std::string format = "text";
  auto* validate = app.add_subcommand(
      "validate", "Check model, cluster, profile and plan files (any subset); exit 0 when valid, 2 when not");
  validate->add_option("--model", files.model, "model.yaml, or a Hugging Face config.json (or its directory) with --training");
  validate->add_option("--training", files.training, "the training fields (seq_length, seq_lengths, dtype, training) of a Hugging Face config.json given as --model (docs/inputs.md)");
  validate->add_option("--cluster", files.cluster, "cluster.yaml");
  validate->add_option("--profile", files.profiles, "profile.yaml (repeatable)");
  validate->add_option("--plan", files.plan, "plan.json; --model/--cluster, when given, replace the plan's own");
  validate->add_option("--catalog", files.catalog, "device catalog (default: the built-in configs/devices.yaml)");
  validate->add_option("--format", format, "output: text (a table) or json")->check(CLI::IsMember({"text", "json"}));

  SimulateArgs sim_args;
  auto add_plan_inputs = [&](CLI::App* cmd) {
    cmd->add_option("plan", sim_args.files.plan, "plan.json")->required();
    cmd->add_option("--model", sim_args.files.model, "model.yaml (or a Hugging Face config.json with --training), replacing the plan's own");
    cmd->add_option("--training", sim_args.files.training, "the training fields (seq_length, seq_lengths, dtype, training) of a Hugging Face config.json given as --model (docs/inputs.md)");
    cmd->add_option("--cluster", sim_args.files.cluster, "cluster.yaml, replacing the plan's own");
    cmd->add_option("--profile", sim_args.files.profiles,
                    "profile.yaml (repeatable), replacing the plan's own for its device type (the plan's embedded "
                    "profiles otherwise; analytic costs for device types without one)");
    cmd->add_option("--catalog", sim_args.files.catalog, "device catalog (default: built in)");
    cmd->add_option("--schedule", sim_args.schedule, "replace the plan's schedule")
        ->check(CLI::IsMember({"gpipe", "1f1b", "eager-1f1b", "h-1f1b", "virtual-1f1b"}));
    cmd->add_option("--resharding", sim_args.resharding,
                    "force one strategy between all stages (default cheapest: the plan's where it names one, else the cheapest)")
        ->check(CLI::IsMember({"cheapest", "all-pairs", "gather-send-scatter", "inner-dp-rank0", "send-recv-allgather"}));
    cmd->add_flag("--overlap-sync", sim_args.overlap_sync,
                  "what if the gradient sync overlapped the last backward (hetexec syncs after it)");
    cmd->add_option("--trace", sim_args.trace, "write a Chrome trace of one iteration (open in Perfetto)");
  };
  auto* simulate = app.add_subcommand(
      "simulate", "Predict a plan: warm-ups, iteration time, throughput, MFU, memory per stage (the plan's derived fields)");
  add_plan_inputs(simulate);
  simulate->add_option("--format", sim_args.format, "table (default) or json (the completed plan)")
      ->check(CLI::IsMember({"table", "json"}));
  simulate->add_option("-o,--output", sim_args.output, "write the completed plan to this file");
  simulate->add_flag("--assign-lengths", sim_args.assign_lengths,
                     "first re-deal the model's sequence-length buckets over the pipelines (swapping micro-batches of different "
                     "lengths between pipelines while the predicted iteration drops: long sequences to the pipelines that run "
                     "them fastest)");
  simulate->add_option("--time-dilation", sim_args.time_dilation,
                       "predict a run of hetexec run-local --emulate-links --time-dilation X on the profiled machine: compute "
                       "and links X times slower, each message also paying the machine's transport (the profiles' `transport`)")
      ->check(CLI::Range(1.0, 1000.0));
  simulate->add_option("--measured", sim_args.measured,
                       "a measured run's trace (hetexec run-local --trace): print predicted beside measured per stage "
                       "(--format json: as JSON) instead of the prediction");
  auto* sbs = simulate->add_option("--side-by-side", sim_args.side_by_side,
                                   "with --measured: write one Chrome trace holding the predicted and the measured timeline");
  sbs->needs(simulate->get_option("--measured"));
  auto* show = app.add_subcommand("show", "Print a plan's stage table and predicted summary, or draw it (svg, html)");
  add_plan_inputs(show);
  hetplan::ShowArgs show_args;
  hetplan::add_show_options(show, show_args);

  SearchArgs search_args;
  auto add_search_inputs = [&](CLI::App* cmd) {
    cmd->add_option("--model", search_args.model, "model.yaml, or a Hugging Face config.json (or its directory) with --training")->required();
    cmd->add_option("--training", search_args.training, "the training fields (seq_length, seq_lengths, dtype, training) of a Hugging Face config.json given as --model (docs/inputs.md)");
    cmd->add_option("--cluster", search_args.cluster, "cluster.yaml")->required();
    cmd->add_option("--profile", search_args.profiles, "profile.yaml (repeatable); analytic costs without");
    cmd->add_option("--catalog", search_args.catalog, "device catalog (default: built in)");
    cmd->add_option("--schedule", search_args.schedule, "auto (1f1b and h-1f1b) or one schedule")
        ->check(CLI::IsMember({"auto", "gpipe", "1f1b", "eager-1f1b", "h-1f1b", "virtual-1f1b"}));
    cmd->add_option("--time-budget", search_args.time_budget, "seconds for the whole search (default: 8, or devices / 200 above 1,600 devices, at most 45; "
                    "auto returns earlier when all its algorithms are done)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--threads", search_args.threads, "worker threads (default: all cores)")->check(not_negative);
    cmd->add_option("--seed", search_args.seed, "seed for sampling algorithms (mcts)");
    cmd->add_option("--mcts-lambda", search_args.mcts_lambda, "mcts: UCB exploration weight (default 10)")
        ->check(not_negative);
    cmd->add_option("--mcts-iterations", search_args.mcts_iterations,
                    "mcts: iterations per root subtree (default 0: no cap)")
        ->check(not_negative);
    cmd->add_option("--mcts-patience", search_args.mcts_patience,
                    "mcts: a subtree stops after evaluating max(N, i) layouts without a better plan than the one "
                    "found after i (default 256; 0: run until the time budget ends)")
        ->check(not_negative);
    cmd->add_option("--granularity", search_args.granularity, "layer or sublayer (attn/mlp units, HAPT §5.1)")
        ->check(CLI::IsMember({"layer", "sublayer"}));
    cmd->add_option("--format", search_args.format, "table (default) or json")->check(CLI::IsMember({"table", "json"}));
  };
  auto* search = app.add_subcommand("search", "Find the best plan for a model on a cluster");
  add_search_inputs(search);
  search->add_option("--algo", search_args.algo, "auto (default), uniform, exhaustive, hapt, heteroauto, mcts or hexiscale")
      ->check(CLI::IsMember(het::search::algorithm_names()));
  search->add_option("--write-top", search_args.write_top,
                     "also write the best plan of each of the N best shapes (stages, their units, subclusters, dp, tp, cp, "
                     "recompute; not the grouping into pipelines, micro-batching, devices or schedule), best first, as "
                     "OUTPUT-STEM.1.plan.json .. OUTPUT-STEM.N.plan.json (needs -o)")
      ->check(CLI::PositiveNumber);
  search->add_option("--memory-headroom", search_args.memory_headroom,
                     "fraction of each device's usable memory (its memory less the catalog's or cluster's reserve) every "
                     "stage leaves free (default 0.05)")
      ->check(CLI::Range(0.0, 0.9));
  search->add_option("--top", search_args.top, "candidates per algorithm re-ranked by the simulator (default 16)")
      ->check(CLI::PositiveNumber);
  search->add_option("-o,--output", search_args.output, "write the plan to this file");
  search->add_option("--objective", search_args.objective,
                     "time (default) or cost: the least USD per million tokens, from the devices' prices (catalog or cluster); "
                     "searches every subset of the subclusters, so a plan may leave some idle")
      ->check(CLI::IsMember({"time", "cost"}));
  search->add_option("--max-cost-per-hour", search_args.max_cost_per_hour,
                     "only plans whose devices rent for at most this (e.g. 100USD/h)");
  search->add_option("--max-iteration-s", search_args.max_iteration_s, "only plans whose iteration takes at most this")
      ->check(CLI::PositiveNumber);
  search->add_flag("--pareto", search_args.pareto, "also print the time/cost front of the plans found (JSON with --format json)");
  auto* compare = app.add_subcommand("compare", "Run several search algorithms on the same inputs and tabulate them");
  add_search_inputs(compare);
  compare->add_option("--algos", search_args.algos, "algorithms (default: uniform heteroauto hapt mcts hexiscale auto)")
      ->check(CLI::IsMember(het::search::algorithm_names()));

  SweepArgs sweep_args;
  auto* sweep = app.add_subcommand("sweep", "What if: the best plan at every value of one field of the model or the cluster");
  add_search_inputs(sweep);
  sweep->add_option("--vary", sweep_args.vary,
                    "PATH=V1,V2,... or PATH=LO..HI[/N]: a field of the model or cluster file (links[0].bandwidth, "
                    "subclusters[v100].nodes, training.global_batch_size) and its values; a range has N points (ratio-spaced "
                    "when HI/LO >= 10); nodes=0 removes a subcluster")
      ->required();
  sweep->add_option("--algo", search_args.algo, "the search at each point (default auto)")
      ->check(CLI::IsMember(het::search::algorithm_names()));
  sweep->add_option("--svg", sweep_args.svg, "also draw iteration time and tokens/s against the value (SVG)");
  sweep->add_flag("--no-warm-start", sweep_args.cold,
                  "search each point as a one-off search would (by default auto's search at a point also refines the point "
                  "before's best plans, and is never worse for it)");
  sweep->footer("docs/search.md, \"What if\".");

  ReplanArgs replan_args;
  auto* replan = app.add_subcommand("replan", "The best plan for the devices a plan's cluster has left (or a new cluster), and the switch to it");
  replan->add_option("plan", replan_args.plan, "the plan running now (plan.json)")->required();
  replan->add_option("--without", replan_args.without, "a lost node SUB/NODE or device SUB/NODE:DEVICE (repeatable)");
  replan->add_option("--cluster", replan_args.new_cluster, "the new cluster.yaml instead (devices of the same subcluster, node and index are the same)");
  replan->add_option("--model", replan_args.model, "model.yaml, for a plan that does not embed its model");
  replan->add_option("--old-cluster", replan_args.old_cluster, "the cluster.yaml the plan runs on, for a plan that does not embed it");
  replan->add_option("--profile", search_args.profiles, "profile.yaml (repeatable), replacing the plan's own for its device type");
  replan->add_option("--catalog", search_args.catalog, "device catalog (default: built in)");
  replan->add_option("--time-budget", search_args.time_budget, "seconds for the search (as hetplan search)")->check(CLI::PositiveNumber);
  replan->add_option("--threads", search_args.threads, "worker threads (default: all cores)")->check(not_negative);
  replan->add_option("-o,--output", search_args.output, "write the new plan to this file");
  replan->add_option("--format", search_args.format, "table (default) or json (the new plan and the switch)")
      ->check(CLI::IsMember({"table", "json"}));
  replan->footer(
      "The switch: what each device of the new plan must receive, values and AdamW moments (fp32), from a surviving\n"
      "holder over the fastest link, least loaded first, else from the checkpoint (Hetu v2 4.3, 6). ZeRO-0 plans.\n"
      "docs/checkpoints.md.");

  ImportArgs import_args;
  auto* profile = app.add_subcommand("profile", "Work with profiles of measured costs");
  profile->require_subcommand(1);
  auto* import = profile->add_subcommand("import", "Convert public profiles (Sailor, Metis) to hetplan.profile/v1");
  import->add_option("--from", import_args.from, "sailor or metis")->required()->check(CLI::IsMember({"sailor", "metis"}));
  import->add_option("dir", import_args.dir, "the profile directory of one model and one GPU")->required();
  import->add_option("--model", import_args.model, "model.yaml of the profiled model's shape (or a Hugging Face config.json with --training)")->required();
  import->add_option("--training", import_args.training, "the training fields (seq_length, seq_lengths, dtype, training) of a Hugging Face config.json given as --model");
  import->add_option("--device", import_args.device, "device type (default: from the directory name)");
  import->add_option("--llm-info", import_args.llm_info,
                     "sailor: misc/llm_info.json, for memory sizes (metis files carry their own: refused)");
  import->add_option("-o,--output", import_args.output, "profile.yaml to write")->required();

  hetplan::ReviewCommands review(app);  // diff, check
  hetplan::CalibrateCommand calibrate(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kInvalid;
  }
  if (validate->parsed()) return run_validate(files, format);
  if (simulate->parsed()) return run_simulate(sim_args, nullptr);
  if (show->parsed()) return run_simulate(sim_args, &show_args);
  if (import->parsed()) return run_import(import_args);
  if (search->parsed()) return run_search(search_args);
  if (compare->parsed()) return run_compare(search_args);
  if (sweep->parsed()) return run_sweep(sweep_args, search_args);
  if (replan->parsed()) return run_replan(replan_args, search_args);
  if (auto status = review.run()) return *status;
  if (auto status = calibrate.run()) return *status;
  return kInvalid;
}
