#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "../bench/instances.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "search/algorithms.hpp"
#include "search/search.hpp"
#include "kept_plans.hpp"
#include "test_util.hpp"

using namespace het;

namespace {

// Every plan a search returns must validate, fit memory, and simulate to its own prediction.
void check_plan(const predict::Outcome& o, const cost::ComputeModel& cm) {
  INFO(write_plan(o.plan));
  test::keep_plan(write_plan(o.plan));
  REQUIRE(validate_plan(o.plan, "search").empty());
  for (const auto& p : o.stages)
    for (const auto& d : p) CHECK(d.memory.total() <= d.capacity);
  REQUIRE(o.plan.algorithm.has_value());
  // The written plan, read back and simulated again, predicts the same iteration time.
  auto back = read_plan(test::doc(write_plan(o.plan), "p.json"), {nullptr, nullptr, &test::catalog()});
  REQUIRE(back.ok());
  auto again = predict::predict(*back, cm, {});
  REQUIRE(again.ok());
  CHECK(again->plan.predicted->iteration_s == Approx(o.plan.predicted->iteration_s).epsilon(1e-9));
}

}  // namespace

TEST_CASE("the benchmarks' generated instances are models and clusters a user could write") {
  // Read back from their JSON as a user's files are: midsize-16 (hidden 2560, 20 heads) once
  // had 8 KV heads, and auto's plans for it did not read back.
  auto check = [](const bench::Instance& in) {
    INFO(in.description);
    auto m = test::doc(to_json(in.model).dump(), "m.json");
    CHECK(read_model(m.file, m.root, "").ok());
    auto c = test::doc(to_json(in.cluster).dump(), "c.json");
    CHECK(read_cluster(c.file, c.root, "", test::catalog()).ok());
  };
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    check(bench::random_instance(seed, test::catalog()));
    check(bench::midsize_instance(seed, test::catalog()));
  }
  for (std::uint64_t seed = 1; seed <= 10; ++seed) check(bench::asymmetric_instance(seed, test::catalog()));
}

TEST_CASE("search on random instances: valid plans, auto never worse than the exhaustive oracle") {
  const int n = 40;
  int within_1pct = 0, compared = 0;
  double worst = 0;
  for (int k = 0; k < n; ++k) {
    auto in = bench::random_instance(5000 + k, test::catalog());
    INFO(in.description);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    for (const char* algo : {"uniform", "hapt", "heteroauto", "mcts", "hexiscale", "auto"}) {
      INFO(algo);
      auto r = search::run(algo, in.model, in.cluster, cm, o);
      if (!r) {
        CHECK(std::string(algo) != "auto");  // auto finds a plan whenever any algorithm does
        continue;
      }
      for (const auto& plan : r->plans) check_plan(plan, cm);
      CHECK(r->plans.front().plan.predicted->iteration_s >= r->lower_bound_s * (1 - 1e-9));
      if (std::string(algo) == "hexiscale") {  // its k = 1 is heteroauto on the whole cluster
        auto h = search::run("heteroauto", in.model, in.cluster, cm, o);
        if (h) CHECK(r->plans.front().plan.predicted->iteration_s <= h->plans.front().plan.predicted->iteration_s * (1 + 1e-9));
      }
      if (std::string(algo) == "auto" && oracle) {
        // auto includes the oracle on small instances: it can only be better.
        CHECK(r->plans.front().plan.predicted->iteration_s <= oracle->plans.front().plan.predicted->iteration_s * 1.01);
      }
    }
    // The scalable portfolio alone (no exhaustive) against the oracle.
    search::Options p = o;
    p.auto_algorithms = {"uniform", "heteroauto", "hapt", "mcts"};
    auto portfolio = search::run("auto", in.model, in.cluster, cm, p);
    if (oracle && portfolio) {
      ++compared;
      const double gap = portfolio->plans.front().plan.predicted->iteration_s / oracle->plans.front().plan.predicted->iteration_s - 1;
      within_1pct += gap <= 0.01;
      worst = std::max(worst, gap);
    }
  }
  INFO("portfolio within 1% of the oracle on " << within_1pct << "/" << compared << ", worst gap " << worst);
  CHECK(compared >= n * 9 / 10);
  CHECK(within_1pct >= compared * 95 / 100);
  CHECK(worst <= 0.10);
}

// Issue 17: a search keeps each device's reserve and its headroom. Every plan every algorithm
// returns, with a reserve on each device type and a 5% headroom, uses at most
// (memory − reserve) × 0.95 on each device, computed here from the cluster.
TEST_CASE("search on random instances: no plan uses more than (memory - reserve) x (1 - headroom) of a device") {
  int searched = 0;
  for (int k = 0; k < 20; ++k) {
    auto in = bench::random_instance(7000 + k, test::catalog());
    for (std::size_t j = 0; j < in.cluster.subclusters.size(); ++j)  // 2%, 5%, 8%, ... of each type's memory
      in.cluster.subclusters[j].device.reserve = in.cluster.subclusters[j].device.memory * (0.02 + 0.03 * double((k + j) % 4));
    INFO(in.description);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.predict.memory_headroom = 0.05;
    for (const char* algo : {"uniform", "hapt", "heteroauto", "mcts", "hexiscale", "auto"}) {
      INFO(algo);
      auto r = search::run(algo, in.model, in.cluster, cm, o);
      if (!r) continue;
      ++searched;
      for (const auto& plan : r->plans)
        for (std::size_t pi = 0; pi < plan.stages.size(); ++pi)
          for (std::size_t si = 0; si < plan.stages[pi].size(); ++si) {
            const DeviceSpec& dev = in.cluster.find(plan.plan.pipelines[pi].stages[si].subcluster)->device;
            INFO("pipeline " << pi << " stage " << si << " on " << dev.type);
            CHECK(plan.stages[pi][si].memory.total() <= (dev.memory - dev.reserve) * 0.95 * (1 + 1e-12));
          }
    }
  }
  CHECK(searched >= 20 * 6 * 3 / 4);  // most instances have plans: the property is not vacuous
}

namespace {

struct Seed {
  ModelSpec model;
  ClusterSpec cluster;
};

Seed load_seed(const std::string& model, const std::string& cluster) {
  auto m = load_model(std::string(HET_SOURCE_DIR "/configs/models/") + model + ".yaml");
  auto c = load_cluster(std::string(HET_SOURCE_DIR "/configs/clusters/") + cluster + ".yaml", test::catalog());
  REQUIRE(m.ok());
  REQUIRE(c.ok());
  return {*m, *c};
}

double best_of(const Result<search::SearchOutput>& r) { return r->plans.front().plan.predicted->iteration_s; }

// auto with only the quick members (uniform, heteroauto) beside the refinement: deterministic,
// whatever the load, where its phases cut by wall time (a quarter of the budget first) never
// bind. Its best plan is checked (validates, fits memory).
Result<search::SearchOutput> quick_auto(const ModelSpec& model, const ClusterSpec& cluster, const cost::ComputeModel& cm,
                                        double budget_s = 0) {
  search::Options o;
  o.auto_algorithms = {"uniform", "heteroauto"};
  o.time_budget_s = budget_s;
  auto out = search::run("auto", model, cluster, cm, o);
  REQUIRE(out.ok());
  check_plan(out->plans.front(), cm);
  return out;
}
Result<search::SearchOutput> quick_auto(const Seed& s, const cost::ComputeModel& cm) {
  return quick_auto(s.model, s.cluster, cm);
}

}  // namespace

TEST_CASE("mcts on random instances: gap to the exhaustive oracle") {
  // mcts's space holds the oracle's (an ordered subset of subclusters, one (d, c, t) per used
  // subcluster, all its devices over k pipelines) except where HetAuto's P1 cuts it: the oracle
  // may give a stage only the embedding or the head, mcts gives every stage a layer. Small
  // trees are explored to the end, so elsewhere mcts matches the oracle. Where P1 cuts the
  // oracle's plan, the gap is what the cut costs: up to 12.8% (random-7028: a head-only last
  // stage of a 4-stage pipeline beats mcts's 2-stage dp 2 plan once the gradient sync is
  // costed after the last backward, as the runtime runs it), 17.6% since the sync is costed
  // bucket by bucket as the runtime reduces them (gpt's tied embedding between the first and
  // last stages, the whole parameters over every TP shard: a stage with only the embedding or
  // the head syncs less).
  const int n = 40;
  int compared = 0, within_1pct = 0, p1 = 0;
  double worst = -1, worst_p1 = -1, sum = 0;
  for (int k = 0; k < n; ++k) {
    auto in = bench::random_instance(7000 + k, test::catalog());
    INFO(in.description);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.time_budget_s = 30;
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    auto mcts = search::run("mcts", in.model, in.cluster, cm, o);
    if (!oracle) continue;
    REQUIRE(mcts.ok());
    for (const auto& plan : mcts->plans) check_plan(plan, cm);
    CHECK_FALSE(mcts->algorithms.front().timed_out);  // small trees end before the budget
    const double gap = best_of(mcts) / best_of(oracle) - 1;
    const int head = in.model.num_layers + 1;  // unit of the head (layer granularity)
    bool layerless = false;                    // the oracle's plan has a stage without a layer
    for (const auto& st : oracle->plans.front().plan.pipelines.front().stages)
      layerless |= st.first == st.last && (st.first == 0 || st.first == head);
    if (layerless) {
      ++p1;
      worst_p1 = std::max(worst_p1, gap);
      continue;
    }
    ++compared;
    within_1pct += gap <= 0.01;
    worst = std::max(worst, gap);
    sum += gap;
  }
  INFO("mcts within 1% of the oracle on " << within_1pct << "/" << compared << ", mean gap " << sum / std::max(1, compared)
                                          << ", worst gap " << worst << "; " << p1
                                          << " where the oracle's plan breaks P1, worst gap there " << worst_p1);
  CHECK(compared + p1 >= n * 8 / 10);
  CHECK(within_1pct == compared);
  CHECK(worst <= 0.01);
  CHECK(worst_p1 <= 0.18);
}

TEST_CASE("mcts is deterministic for a seed and a thread count") {
  const Seed s = load_seed("hapt-gpt-15b", "hapt-4x8a100-4x8v100");
  cost::ComputeModel cm(s.model, {});
  search::Options o;
  o.time_budget_s = 120;  // the iteration cap, not the budget, ends it
  o.mcts_iterations = 150;
  o.mcts_patience = 0;
  o.seed = 7;
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    o.threads = threads;
    auto a = search::run("mcts", s.model, s.cluster, cm, o);
    auto b = search::run("mcts", s.model, s.cluster, cm, o);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK_FALSE(a->algorithms.front().timed_out);
    check_plan(a->plans.front(), cm);
    CHECK(a->algorithms.front().candidates == b->algorithms.front().candidates);
    REQUIRE(a->plans.size() == b->plans.size());
    for (std::size_t i = 0; i < a->plans.size(); ++i) {
      Plan pa = a->plans[i].plan, pb = b->plans[i].plan;
      pa.algorithm.reset(), pb.algorithm.reset();  // holds the search's seconds
      CHECK(write_plan(pa) == write_plan(pb));
    }
  }
}

TEST_CASE("mcts is monotone in its budget for a fixed seed") {
  const std::pair<const char*, const char*> seeds[] = {
      {"hapt-gpt-15b", "hapt-4x8a100-4x8v100"},
      {"hetauto-exp2-llama-64l", "hetauto-exp2-32h20-32a100-32a2"},
  };
  for (auto [model_name, cluster_name] : seeds) {
    INFO(model_name << " on " << cluster_name);
    const Seed s = load_seed(model_name, cluster_name);
    cost::ComputeModel cm(s.model, {});
    search::Options o;
    o.time_budget_s = 120;
    o.seed = 3;
    o.mcts_patience = 0;  // caps and budgets alone end it
    // Iteration caps: exact prefixes of one sequence per subtree.
    double previous = 1e300;
    for (std::int64_t cap : {10, 40, 160}) {
      INFO("iterations " << cap);
      o.mcts_iterations = cap;
      auto r = search::run("mcts", s.model, s.cluster, cm, o);
      REQUIRE(r.ok());
      CHECK(best_of(r) <= previous);
      previous = best_of(r);
    }
    // Time budgets: the longer run's sequences extend the shorter's.
    o.mcts_iterations = 0;
    o.time_budget_s = 0.2;
    auto short_run = search::run("mcts", s.model, s.cluster, cm, o);
    o.time_budget_s = 2;
    auto long_run = search::run("mcts", s.model, s.cluster, cm, o);
    REQUIRE(long_run.ok());
    check_plan(long_run->plans.front(), cm);
    if (short_run) CHECK(best_of(long_run) <= best_of(short_run));
  }
}

TEST_CASE("auto finds the plans of two pipeline shapes that beat every plan of identical pipelines") {
  // The exhaustive oracle covers every layout of identical pipelines: on these instances a
  // plan with pipelines of different shapes (hexiscale's) beats its best, and auto returns one.
  for (int k = 0; k < 12; ++k) {
    auto in = bench::asymmetric_instance(9000 + k, test::catalog());
    INFO(in.description);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.time_budget_s = 120;
    auto symmetric = search::run("exhaustive", in.model, in.cluster, cm, o);
    auto best = search::run("auto", in.model, in.cluster, cm, o);
    REQUIRE(symmetric.ok());
    REQUIRE(best.ok());
    check_plan(best->plans.front(), cm);
    const Plan& plan = best->plans.front().plan;
    std::set<std::string> shapes;
    for (const auto& pipe : plan.pipelines) {
      std::string shape;
      for (const auto& st : pipe.stages)
        shape += st.subcluster + ":" + std::to_string(st.first) + "-" + std::to_string(st.last) + "/" + std::to_string(st.tp) + " ";
      shapes.insert(shape);
    }
    INFO(write_plan(plan));
    CHECK(shapes.size() >= 2);
    CHECK(best_of(best) < 0.95 * best_of(symmetric));
  }
}

TEST_CASE("mcts stops by itself once its subtrees converge") {
  const Seed s = load_seed("hetauto-exp2-llama-64l", "hetauto-exp2-32h20-32a100-32a2");
  cost::ComputeModel cm(s.model, {});
  search::Options o;
  o.time_budget_s = 300;
  auto converged = search::run("mcts", s.model, s.cluster, cm, o);
  REQUIRE(converged.ok());
  CHECK_FALSE(converged->algorithms.front().timed_out);
  CHECK(converged->seconds < 60);
  // Without the rule it runs to the budget: the rule, not an exhausted tree, stopped it.
  o.mcts_patience = 0;
  o.time_budget_s = 2 * converged->seconds + 1;
  auto to_budget = search::run("mcts", s.model, s.cluster, cm, o);
  REQUIRE(to_budget.ok());
  CHECK(to_budget->algorithms.front().timed_out);
  CHECK(best_of(to_budget) <= best_of(converged));  // the same sequences, extended
}

TEST_CASE("auto is at least as good as each algorithm alone on the seed configurations") {
  // Each algorithm runs in auto as it runs alone (deterministic, ending by itself), so with a
  // budget that stops none of them, auto's plan is the best of theirs or better (refinement).
  const std::pair<const char*, const char*> seeds[] = {
      {"hapt-gpt-15b", "hapt-4x8a100-4x8v100"},
      {"hetauto-exp1-llama-48l", "hetauto-exp1-32a100-32a2"},
      {"hexiscale-llama2-7b", "hexiscale-setting1"},
      {"opt-350m", "demo-1x4a100-1x4v100"},
  };
  for (auto [model_name, cluster_name] : seeds) {
    INFO(model_name << " on " << cluster_name);
    const Seed s = load_seed(model_name, cluster_name);
    cost::ComputeModel cm(s.model, {});
    search::Options o;
    o.time_budget_s = 600;
    o.converge = false;  // every member runs to its own end, as alone
    auto best = search::run("auto", s.model, s.cluster, cm, o);
    REQUIRE(best.ok());
    check_plan(best->plans.front(), cm);
    // Every plan it returns carries the simulator's detail per stage, though mcts's and
    // hexiscale's own rankings predict without it (Evaluator::ranking_options).
    for (const auto& ranked : best->plans) {
      std::size_t stages = 0;
      for (const auto& q : ranked.plan.pipelines) stages += q.stages.size();
      CHECK(ranked.plan.predicted->per_stage.size() == stages);
    }
    for (const auto& r : best->algorithms) CHECK_FALSE(r.timed_out);
    // The refinement starts from every algorithm's best: its row is never worse than theirs.
    double others = 1e300, refined = 0;
    for (const auto& r : best->algorithms)
      if (r.name == "refine") refined = r.iteration_s.value_or(1e300);
      else if (r.iteration_s) others = std::min(others, *r.iteration_s);
    CHECK(refined <= others * (1 + 1e-12));
    CHECK(best_of(best) == Approx(refined).epsilon(1e-12));
    for (const char* algo : {"uniform", "hapt", "heteroauto", "mcts", "hexiscale"}) {
      INFO(algo);
      auto alone = search::run(algo, s.model, s.cluster, cm, o);
      if (!alone) continue;
      CHECK_FALSE(alone->algorithms.front().timed_out);
      CHECK(best_of(best) <= best_of(alone) * (1 + 1e-12));
      for (const auto& r : best->algorithms)  // the same result inside auto as alone
        if (r.name == algo) CHECK(r.iteration_s.value_or(0) == Approx(best_of(alone)).epsilon(1e-12));
    }
  }
}

TEST_CASE("auto stops once converged and stays within 1% of the portfolio run to its end") {
  // Issue 20: with the convergence stop (the default), the slower members are stopped once the
  // portfolio's best has not improved for half the time it took to reach it; the plan must
  // stay within 1% of the one auto finds when every member runs to its own end.
  const std::pair<const char*, const char*> seeds[] = {
      {"hapt-gpt-15b", "hapt-4x8a100-4x8v100"},
      {"hetauto-exp1-llama-48l", "hetauto-exp1-32a100-32a2"},
      {"hetu-llama-32b", "hetu-16h800-16h20"},
  };
  for (auto [model_name, cluster_name] : seeds) {
    INFO(model_name << " on " << cluster_name);
    const Seed s = load_seed(model_name, cluster_name);
    cost::ComputeModel cm(s.model, {});
    search::Options full;
    full.time_budget_s = 600;
    full.converge = false;
    auto reference = search::run("auto", s.model, s.cluster, cm, full);
    auto converged = search::run("auto", s.model, s.cluster, cm, {});
    REQUIRE(reference.ok());
    REQUIRE(converged.ok());
    check_plan(converged->plans.front(), cm);
    CHECK(best_of(converged) <= best_of(reference) * 1.01);
  }
}

TEST_CASE("auto beats the uniform baseline on the heterogeneous seed configurations") {
  const std::pair<const char*, const char*> seeds[] = {
      {"hapt-gpt-15b", "hapt-4x8a100-4x8v100"},
      {"hapt-gpt-39b", "hapt-4x8a100-4x8v100-10gbps"},
      {"hetu-llama-32b", "hetu-16h800-16h20"},
      {"hetauto-exp1-llama-48l", "hetauto-exp1-32a100-32a2"},
      {"hexiscale-llama2-7b", "hexiscale-setting1"},
      {"opt-350m", "demo-1x4a100-1x4v100"},
  };
  for (auto [model_name, cluster_name] : seeds) {
    INFO(model_name << " on " << cluster_name);
    auto m = load_model(std::string(HET_SOURCE_DIR "/configs/models/") + model_name + ".yaml");
    auto c = load_cluster(std::string(HET_SOURCE_DIR "/configs/clusters/") + cluster_name + ".yaml", test::catalog());
    REQUIRE(m.ok());
    REQUIRE(c.ok());
    cost::ComputeModel cm(*m, {});
    search::Options o;
    o.time_budget_s = 4;
    auto uniform = search::run("uniform", *m, *c, cm, o);
    auto best = search::run("auto", *m, *c, cm, o);
    REQUIRE(best.ok());
    check_plan(best->plans.front(), cm);
    if (uniform) CHECK(best->plans.front().plan.predicted->iteration_s < uniform->plans.front().plan.predicted->iteration_s);
  }
}

TEST_CASE("hapt and heteroauto plan HetAuto's exp3 (736 devices, 4 subclusters, 96 layers) in under 60 s") {
  auto m = load_model(HET_SOURCE_DIR "/configs/models/hetauto-exp3-llama-96l.yaml");
  auto c = load_cluster(HET_SOURCE_DIR "/configs/clusters/hetauto-exp3-32h20-64h800-128a100-512a2.yaml", test::catalog());
  REQUIRE(m.ok());
  REQUIRE(c.ok());
  REQUIRE(c->num_devices() == 736);
  cost::ComputeModel cm(*m, {});
  for (const char* algo : {"hapt", "heteroauto"}) {
    INFO(algo);
    search::Options o;
    o.time_budget_s = 120;  // the budget must not be what stops it
    const auto t0 = std::chrono::steady_clock::now();
    auto r = search::run(algo, *m, *c, cm, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(r.ok());
    CHECK(s < 60);
    CHECK_FALSE(r->algorithms.front().timed_out);
    check_plan(r->plans.front(), cm);
  }
}

TEST_CASE("the lower bound never exceeds the exhaustive optimum and charges exp3 the bubble or the sync") {
  // Small instances: the oracle's best plan (simulated) is at or above both bounds.
  int above_work = 0, compared = 0;
  for (int k = 0; k < 40; ++k) {
    auto in = bench::random_instance(7100 + k, test::catalog());
    INFO(in.description);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    if (!oracle) continue;
    search::Evaluator eval(in.model, in.cluster, cm, in.model.training.recompute, o.granularity, o.predict);
    const auto& mbs = in.model.training.micro_batch_sizes;
    const double work = search::work_lower_bound(eval, mbs);
    const double pipe = search::pipeline_lower_bound(eval, mbs, work, 0);  // no cap: the bound's own
    const double best = oracle->plans.front().plan.predicted->iteration_s;
    ++compared;
    CHECK(pipe <= best * (1 + 1e-9));
    CHECK(oracle->lower_bound_s >= work);  // the printed bound: the larger of the two, capped by the best plan
    CHECK(oracle->lower_bound_s <= best * (1 + 1e-9));
    above_work += pipe > work * 1.01;
  }
  INFO("the pipeline bound above the work bound on " << above_work << " of " << compared);
  CHECK(compared >= 30);
  CHECK(above_work >= compared / 4);  // it charges something the work bound does not, often
  // Behind links of 100 Mbit/s between subclusters, where the bound's hops bind: still at or
  // below the oracle's best (simulated), and above the same instance's bound at its own links
  // on many (a bound without hops does not see the links between subclusters at all).
  int slow = 0, raised = 0;
  for (int k = 0; k < 40; ++k) {
    auto in = bench::random_instance(7100 + k, test::catalog());
    if (in.cluster.subclusters.size() < 2) continue;
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    const auto& mbs = in.model.training.micro_batch_sizes;
    auto pipeline_bound = [&](const ClusterSpec& c) {
      search::Evaluator eval(in.model, c, cm, in.model.training.recompute, o.granularity, o.predict);
      return search::pipeline_lower_bound(eval, mbs, search::work_lower_bound(eval, mbs), 0);
    };
    const double fast = pipeline_bound(in.cluster);
    in.cluster.links.clear();
    in.cluster.default_link = LinkSpec{100e6 / 8, 1e-3};
    INFO(in.description << ", 100 Mbit/s between subclusters");
    auto oracle = search::run("exhaustive", in.model, in.cluster, cm, o);
    if (!oracle) continue;
    const double pipe = pipeline_bound(in.cluster);
    CHECK(pipe <= oracle->plans.front().plan.predicted->iteration_s * (1 + 1e-9));
    ++slow;
    raised += pipe > fast * 1.01;
  }
  INFO("behind slow links: the bound raised on " << raised << " of " << slow);
  CHECK(slow >= 20);
  CHECK(raised >= slow / 4);
  // exp3: the work bound was 4.88 s against plans of 7.61 s (gap 56%, 2026-12-01).
  auto m = load_model(HET_SOURCE_DIR "/configs/models/hetauto-exp3-llama-96l.yaml");
  auto c = load_cluster(HET_SOURCE_DIR "/configs/clusters/hetauto-exp3-32h20-64h800-128a100-512a2.yaml", test::catalog());
  REQUIRE(m.ok());
  REQUIRE(c.ok());
  cost::ComputeModel cm(*m, {});
  search::Options o;
  search::Evaluator eval(*m, *c, cm, m->training.recompute, o.granularity, o.predict);
  const double work = search::work_lower_bound(eval, m->training.micro_batch_sizes);
  const double pipe = search::pipeline_lower_bound(eval, m->training.micro_batch_sizes, work, 0);
  // The (P, b) bounded first (the search's best plan's) only orders the work: with the search's
  // best as the cap, the bound is the same whichever comes first.
  const double capped = search::pipeline_lower_bound(eval, m->training.micro_batch_sizes, work, 7.2125);
  for (search::Pipelining first : {search::Pipelining{8, 1}, search::Pipelining{2, 2}, search::Pipelining{64, 1}})
    CHECK(search::pipeline_lower_bound(eval, m->training.micro_batch_sizes, work, 7.2125, first) == capped);
  // 5.61 s (1.15x) while pi lost the stages shorter than its grid and the devices were only
  // priced; 6.24 s (1.28x) with pi kept, the hops between subclusters and the devices counted.
  CHECK(pipe > work * 1.2);
  // Issue 20's goal, a gap of at most 15% to the plan auto returns (7.2125 s): 6.2331 s (15.7%)
  // before a stage's sync waited for the forwards before it (pf + m·c + tail), 6.2769 s with it.
  CHECK(capped >= 7.2125 / 1.15);
}

TEST_CASE("a search that cannot fit names the binding constraint") {
  auto md = test::doc("name: big\narchitecture: gpt\nnum_layers: 4\nhidden_size: 16384\nnum_attention_heads: 128\n"
                      "vocab_size: 50000\nseq_length: 4096\ntraining: {global_batch_size: 8, zero_stage: 0}\n",
                      "m.yaml");
  auto cd = test::doc(R"(name: tiny
subclusters:
  - {name: a, device: {type: A100-40GB, memory: 4GiB}, nodes: 1, devices_per_node: 1}
  - {name: b, device: {type: V100-16GB, memory: 2GiB}, nodes: 1, devices_per_node: 1}
links:
  - {between: [a, b], bandwidth: 10Gbit/s, latency: 1ms}
)",
                      "c.yaml");
  auto m = read_model(md.file, md.root, "");
  auto c = read_cluster(cd.file, cd.root, "", test::catalog());
  REQUIRE(m.ok());
  REQUIRE(c.ok());
  cost::ComputeModel cm(*m, {});
  auto r = search::run("auto", *m, *c, cm, {});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.errors()[0].message, Catch::Contains("no plan fits memory") && Catch::Contains("GiB on a (3.0 GiB usable)"));
}

TEST_CASE("the refinement expands a seed whose layout it has seen when the seed is the best it has") {
  // Issue 20, midsize-48: hapt offered a layout under 1f1b, then the same layout under h-1f1b,
  // 33% better. The refinement keys layouts by their shapes alone, had seen this one, dropped
  // the better seed, and never expanded the layout again (refine.cpp `add`). Here the layout is
  // marked seen before its candidate comes as the only seed: it must still be expanded (its
  // neighbours evaluated); without the fix nothing is.
  std::optional<search::Candidate> seed;
  std::optional<bench::Instance> in;
  for (std::uint64_t k = 5000; k < 5040 && !seed; ++k) {
    in.emplace(bench::random_instance(k, test::catalog()));
    cost::ComputeModel cm(in->model, {});
    const search::Evaluator eval(in->model, in->cluster, cm, in->model.training.recompute, Granularity::layer, {});
    search::Layout l;  // one device of every subcluster, a stage each
    for (std::size_t j = 0; j < in->cluster.subclusters.size(); ++j) l.stages.push_back({int(j), 1, 1, 1});
    if (!eval.admissible(l)) continue;
    auto found = eval.evaluate(l, {ScheduleKind::h_1f1b});
    if (!found.empty()) seed = found.front();
  }
  REQUIRE(seed);
  INFO(in->description);
  cost::ComputeModel cm(in->model, {});
  const search::Evaluator eval(in->model, in->cluster, cm, in->model.training.recompute, Granularity::layer, {});
  search::Options o;
  search::Work w(eval, o, std::chrono::steady_clock::now() + std::chrono::seconds(60), "refine");
  search::Refinement r;
  r.seen.insert(search::Refinement::key(seed->layout));
  search::run_refine(w, r, {*seed});
  CHECK(w.layouts() > 0);
  CHECK(r.seen.size() > 1);
}

namespace {

// Midsize-9 and hapt's best plan there as a refinement seed (the basin tests below).
struct HaptSeed {
  const bench::Instance in = bench::midsize_instance(9, test::catalog());
  const cost::ComputeModel cm{in.model, {}};
  const search::Evaluator eval{in.model, in.cluster, cm, in.model.training.recompute, Granularity::layer, {}};
  search::Layout layout;    // the plan's pipelines and stage shapes
  search::Candidate seed;   // the layout evaluated under the plan's schedule
  HaptSeed() {
    auto hapt = search::run("hapt", in.model, in.cluster, cm, search::Options{});
    REQUIRE(hapt.ok());
    const Plan& plan = hapt->plans.front().plan;
    layout.pipelines = int(plan.pipelines.size());
    layout.micro_batch_size = plan.pipelines.front().micro_batch_size;
    for (const Stage& st : plan.pipelines.front().stages)
      layout.stages.push_back({plan.cluster.index_of(st.subcluster), st.dp, st.cp, st.tp});
    auto found = eval.evaluate(layout, {plan.schedule});
    REQUIRE_FALSE(found.empty());
    seed = found.front();
  }
};

}  // namespace

TEST_CASE("the refinement descends from a seed of another basin though its best has moved on since the seed came") {
  // Issue 20, midsize-9: a seed within 10% of the best when it came (the admission then)
  // waited in `basins` until the best's basin had converged; by then the best had gone 12%
  // below it, and the descent (which led to a plan 15% better than that best) was skipped.
  // Here a seed waits 15% behind the best: within kExplore, it must be descended from (its
  // neighbours evaluated); with the test against 10% nothing is.
  const HaptSeed h;
  search::Options o;
  search::Work w(h.eval, o, std::chrono::steady_clock::now() + std::chrono::seconds(60), "refine");
  search::Refinement r;
  r.best = h.seed.estimate_s / 1.15;
  r.basins.push_back(h.seed);
  r.descended.insert(search::Refinement::key(h.layout));
  search::run_refine(w, r, {});
  CHECK(w.layouts() > 0);
  CHECK(r.best < h.seed.estimate_s / 1.15);  // and the descent went below the best it was given
}

TEST_CASE("the refinement takes a seed 22% behind its best as another basin and descends from it") {
  // Issue 20 (kExplore, 10% until 2026-12-07, then 20%, now 25%): 10,000 devices' best comes
  // from hapt's seed that arrived up to 9.97% behind, midsize-25's from mcts's 16.5% behind,
  // midsize-32's from hapt's 21.7% behind. At 20% this seed would enter the frontier instead,
  // to be cut by the best's 1% slack, and never be descended from.
  const HaptSeed h;
  search::Options o;
  search::Work w(h.eval, o, std::chrono::steady_clock::now() + std::chrono::seconds(60), "refine");
  search::Refinement r;
  r.best = h.seed.estimate_s / 1.22;
  search::run_refine(w, r, {h.seed});
  CHECK(r.descended.count(search::Refinement::key(h.layout)) == 1);
  CHECK(r.basins.empty());  // and descended from
  CHECK(w.layouts() > 0);
}

TEST_CASE("the refinement descends from a seed that was its best when it came but was overtaken before it was expanded") {
  // Issue 20, midsize-27: hapt's 19.9674 s plan was the refinement's best for 0.05 s before
  // hapt's 17.9819 s plan came; the newcomer was expanded first, and the 19.9674 s plan's
  // neighbours (one of them on the way to the best plan) then fell outside the new best's
  // slack. Here the seed comes first and a plan 15% better (its stages reversed, its estimate
  // set) right after it in the same call: the seed must still be descended from.
  const HaptSeed h;
  search::Layout other = h.layout;  // its stages in reverse order
  std::reverse(other.stages.begin(), other.stages.end());
  REQUIRE(search::Refinement::key(other) != search::Refinement::key(h.layout));
  auto found = h.eval.evaluate(other, {ScheduleKind::one_f_one_b, ScheduleKind::h_1f1b});
  REQUIRE_FALSE(found.empty());
  search::Candidate better = found.front();
  better.estimate_s = h.seed.estimate_s / 1.15;
  search::Options o;
  search::Work w(h.eval, o, std::chrono::steady_clock::now() + std::chrono::seconds(60), "refine");
  search::Refinement r;
  search::run_refine(w, r, {h.seed, better});
  CHECK(r.basins.empty());
  CHECK(r.best < better.estimate_s);  // the seed's descent went below the plan that overtook it
}

TEST_CASE("auto with hapt beside the refinement finds midsize-48's pipeline of 17 like stages") {
  // Issue 20, midsize-48 (508 devices): hapt offered its pipeline of 16 like stages (dp 2 x tp 8)
  // first under 1f1b, then under h-1f1b, 33% better. The refinement had seen the layout (its
  // key is the shapes alone), so the better seed was dropped and the layout waited in the
  // frontier under its 1f1b estimate until the search stopped; its neighbour of 17 like
  // stages (the free 16 devices as one more such stage) was 6% better again. Both fixes
  // (refine.cpp `add`, and the like stage among `neighbours`' additions) were needed for this
  // plan under the cost model of then. Since the model of TP stages' memory changed
  // (2026-11-28, cost/memory.hpp) the search finds it without either (checked with each taken
  // out), so this holds the plan's quality only; the seed fix has a test of its own (above). On
  // midsize-28 the seed fix still makes 3.8% (4.0293 s against 4.1814, two runs each) and on
  // midsize-32 the like stage 5.8% (2.9934 s against 3.1669), but hapt's timing moves them:
  // midsize-32 gave 3.1669 with both fixes in 2 of 7 runs, so neither is a test.
  auto catalog = builtin_catalog();
  REQUIRE(catalog);
  const bench::Instance in = bench::midsize_instance(48, *catalog);
  cost::ComputeModel cm(in.model, {});
  search::Options o;
  o.auto_algorithms = {"uniform", "hapt"};
  auto out = search::run("auto", in.model, in.cluster, cm, o);
  REQUIRE(out.ok());
  check_plan(out->plans.front(), cm);
  const Plan& best = out->plans.front().plan;
  CHECK(best.predicted->iteration_s <= 3.3814 * 1.001);
  CHECK(best.pipelines.front().stages.size() == 17);
}

TEST_CASE("auto's settling refinement starts from each member's four best plans, then the four best of all") {
  // Issue 20 (search.cpp portfolio_seeds): the members' final plans, each member's best first.
  auto member = [](double first, int n) {
    std::vector<search::Candidate> kept;
    for (int i = 0; i < n; ++i) {
      search::Candidate c;
      c.estimate_s = first + i;
      c.layout.pipelines = int(first) * 100 + i;  // a layout of its own
      kept.push_back(c);
    }
    return kept;
  };
  const auto seeds = search::portfolio_seeds({member(10, 6), member(1, 6), {}});
  std::vector<double> got;
  for (const auto& c : seeds) got.push_back(c.estimate_s);
  CHECK(got == std::vector<double>{10, 11, 12, 13, 1, 2, 3, 4, 1, 2, 3, 4});
}

TEST_CASE("a plan that entered a member's four best when offered stays in what auto feeds its refinement after four better ones") {
  // Issue 20, midsize-27: hapt's 19.9674 s plan leads to the best plan (15.0458 s) but was
  // among hapt's four best only until it found four better ones, in 0.13 s; a feed of each
  // member's four best at the time of the poll missed it when no poll came in that while.
  const HaptSeed h;
  search::Options o;
  search::Work w(h.eval, o, std::chrono::steady_clock::now() + std::chrono::seconds(60), "hapt");
  auto plan = [&](double estimate_s) {
    search::Candidate c = h.seed;
    c.estimate_s = estimate_s;
    c.layout.pipelines = int(estimate_s * 10);  // a layout of its own
    return c;
  };
  for (double e : {20.0, 19.6, 19.0, 18.5, 17.5}) w.offer(plan(e));  // each the best when offered
  w.offer(plan(19.8));  // four ahead of it: not among the four best
  w.offer(plan(30));
  std::vector<double> kept, entered;
  for (const auto& c : w.peek()) kept.push_back(c.estimate_s);
  for (const auto& c : w.entered(0)) entered.push_back(c.estimate_s);
  REQUIRE(kept.size() >= 4);
  CHECK(std::vector<double>(kept.begin(), kept.begin() + 4) == std::vector<double>{17.5, 18.5, 19.0, 19.6});
  CHECK(entered == std::vector<double>{20.0, 19.6, 19.0, 18.5, 17.5});
  CHECK(w.entered(3).size() == 2);  // from the fourth on: what a later poll takes
  CHECK(w.entered(5).empty());
  search::Options one;  // --top 1: only what becomes the one kept enters
  one.top_k = 1;
  search::Work single(h.eval, one, std::chrono::steady_clock::now() + std::chrono::seconds(60), "hapt");
  for (double e : {20.0, 30.0, 19.0}) single.offer(plan(e));
  entered.clear();
  for (const auto& c : single.entered(0)) entered.push_back(c.estimate_s);
  CHECK(entered == std::vector<double>{20.0, 19.0});
}

TEST_CASE("auto refines its members' final plans again from a fresh state where every member ended by itself") {
  // Issue 20: the refinement takes the members' plans as the feed gives them, and where each
  // enters its expansions decides its basin; a second refinement of their final plans from a
  // fresh state (search.cpp) reaches plans the first missed in every run of main: midsize-2
  // 24.7621 s and midsize-6 17.2618 s there (default and 10x runs, three more default runs
  // each), 23.8843 and 16.3849 with it. Without the convergence stop every member ends by itself.
  auto catalog = builtin_catalog();
  REQUIRE(catalog);
  for (const auto& [n, want] : std::vector<std::pair<int, double>>{{2, 23.8843}, {6, 16.3849}}) {
    INFO("midsize-" << n);
    const bench::Instance in = bench::midsize_instance(n, *catalog);
    cost::ComputeModel cm(in.model, {});
    search::Options o;
    o.converge = false;
    auto out = search::run("auto", in.model, in.cluster, cm, o);
    REQUIRE(out.ok());
    check_plan(out->plans.front(), cm);
    for (const auto& r : out->algorithms) CHECK_FALSE(r.timed_out);
    CHECK(out->plans.front().plan.predicted->iteration_s <= want * 1.001);
  }
}

TEST_CASE("the refinement moves an end stage to the other end: one subcluster on both sides of another") {
  // Issue 20: HAPT's GPT-15B on 4x8 A100 + 2x8 V100. auto converged at one pipeline of
  // [v100, v100, a100, a100, a100] (20.1199 s) with every member ending by itself, and only a
  // sweep's warm start found 19.3606 s. The first V100 stage moved to the end estimates 4%
  // better; from there the refinement reaches a pipeline that passes through a subcluster
  // twice (18.6901 s: four pipelines of [a100, a100, a100, v100, a100]), from the quick
  // members' plans alone as from every member's; 20.0431 s without the move.
  Seed s = load_seed("hapt-gpt-15b", "hapt-4x8a100-4x8v100");
  REQUIRE(s.cluster.subclusters[1].name == "v100");
  s.cluster.subclusters[1].nodes = 2;
  cost::ComputeModel cm(s.model, {});
  const auto out = quick_auto(s, cm);
  CHECK(best_of(out) < 19.3606);
  std::vector<std::string> route;
  for (const Stage& st : out->plans.front().plan.pipelines.front().stages)
    if (route.empty() || route.back() != st.subcluster) route.push_back(st.subcluster);
  INFO(route.size() << " runs of subclusters");
  CHECK(std::set<std::string>(route.begin(), route.end()).size() < route.size());
}

TEST_CASE("the refinement rotates a pipeline at a boundary between subclusters") {
  // Issue 20: on 10,000 devices the refinement converged on the route s6 s0 s3 (simulated
  // 1.1783 s) in about half the runs, where s3 s6 s0 gives 1.0623; a swap of neighbouring runs
  // reaches that only through s6 s3 s0 or s0 s6 s3, which the best's slack cut (refine.cpp
  // `neighbours`). Too slow for a test; midsize-18 (128 devices of 3 types) with the quick
  // members alone beside the refinement (deterministic) is 5.2038 s without the rotations,
  // 4.8304 s with them. (midsize-37 was the example before the estimate simulated the split's
  // pipeline and the tables held predict's memory, 2026-12-05: 7.6473 without, 3.5308 with;
  // the refinement's path from the quick members' plans there has changed with each.)
  const bench::Instance in = bench::midsize_instance(18, test::catalog());
  cost::ComputeModel cm(in.model, {});
  CHECK(best_of(quick_auto(in.model, in.cluster, cm, 60)) <= 4.8304 * 1.001);
}

TEST_CASE("the refinement jumps from its converged best to twice the pipelines of half the depth") {
  // Issue 20: midsize-33 (124 devices) with the quick members alone beside the refinement
  // (deterministic): 8.9970 s without the jump, 8.4578 s with it. Every other move keeps a
  // pipeline's devices or changes them by one stage's.
  const bench::Instance in = bench::midsize_instance(33, test::catalog());
  cost::ComputeModel cm(in.model, {});
  CHECK(best_of(quick_auto(in.model, in.cluster, cm, 60)) <= 8.4578 * 1.001);
}

TEST_CASE("the simulator ranks the best layouts of every route the estimate cannot tell apart") {
  // Issue 20: where pipelines' hops weigh, the estimate (HAPT eq. 12-13) errs by a few percent
  // either way, most of all between routes (the subclusters a pipeline passes through): on
  // 10,000 devices the refinement's 16 best by estimate were all of a route that simulates
  // 4.4% slower than the best of another route within 1% of it by estimate. Too slow for a
  // test; here H2's 100B model on its experiment B cluster, with the quick members alone
  // beside the refinement (deterministic): 57.3359 s without the routes' candidates ranked on
  // experiment B (26.0879 on D before the model of TP stages' memory changed, 2026-11-28; D
  // does not tell them apart since). (With every member, H2's experiment A: 28.8804 -> 28.5173 s
  // then, but that depends on when hapt's plans come.)
  const Seed s = load_seed("h2-100b-gbs8m", "h2-exp-b");
  cost::ComputeModel cm(s.model, {});
  CHECK(best_of(quick_auto(s, cm)) <= 56.9844 * 1.0001);
}

TEST_CASE("auto's convergence test: an improvement below 0.1% does not restart the clock, which runs only while the members have the cores") {
  search::Incumbent best;
  CHECK_FALSE(best.stalled(0));  // nothing found yet: never converged
  best.offer(10);
  CHECK_FALSE(best.stalled(1));  // found just now: at least a second to go
  best.tick(0.3);                // 300 ms of the members' time
  best.offer(9.995);             // 0.05% better: not an improvement for the test
  CHECK(best.stalled(0.05));     // 300 ms without one: more than half the 0 s it took
  CHECK_FALSE(best.stalled(1));
  best.offer(9.9);               // 1% better: the clock starts again
  CHECK_FALSE(best.stalled(0.05));
  best.tick(0.1);
  CHECK_FALSE(best.stalled(0.05));  // 0.1 s: less than half the 0.3 s it took
  best.tick(0.1);
  CHECK_FALSE(best.stalled(0.25));  // 0.2 s of at least 0.25
  CHECK(best.stalled(0.1));         // 0.2 s, more than half the 0.3 s it took
  // Found after 100 s of the members' time: converged only after 50 s more of it without an
  // improvement (the wall time in which the refinement ran instead does not count: no tick).
  search::Incumbent late;
  late.tick(100);
  late.offer(5);
  late.tick(49);
  CHECK_FALSE(late.stalled(0));
  late.tick(1);
  CHECK(late.stalled(0));
}

TEST_CASE("auto's convergence test: a member closing in on the best is progress, one far behind it is not") {
  search::Incumbent best;
  best.offer(10);
  best.tick(1);
  CHECK(best.stalled(0.5));
  best.offer(11.5, true);  // a member's own best improved, 15% behind the portfolio's: not converged
  CHECK_FALSE(best.stalled(0.5));
  best.tick(1);
  CHECK(best.stalled(0.5));
  best.offer(13, true);  // 30% behind: outside Incumbent::kMemberWindow
  CHECK(best.stalled(0.5));
  best.offer(11.4, false);  // not the member's own improvement
  CHECK(best.stalled(0.5));
}

TEST_CASE("auto's convergence test where the quick members found nothing: quiet once no member has closed in for a while") {
  // search.cpp kQuiet: on such clusters the search waits while a member improves its own best
  // to within a window of the portfolio's best (midsize-25: mcts 44%, 22%, 16.5% behind).
  search::Incumbent best;
  CHECK(best.members_quiet(1, 1));  // nothing offered
  best.offer(10);
  best.tick(0.3);
  best.offer(14.4, true);  // 44% behind, within 2x: a member closing in
  CHECK_FALSE(best.members_quiet(1, 1));
  CHECK(best.members_quiet(0.2, 1));  // outside a 20% window
  best.tick(0.9);
  CHECK_FALSE(best.members_quiet(1, 1));  // 0.9 s of the members' clock since
  best.tick(0.2);
  CHECK(best.members_quiet(1, 1));  // 1.1 s
  best.offer(25, true);  // 2.5x behind: far behind, not closing in
  CHECK(best.members_quiet(1, 1));
  best.offer(15, false);  // not a member's own improvement
  CHECK(best.members_quiet(1, 1));
  best.offer(12, true);
  CHECK_FALSE(best.members_quiet(1, 1));
  best.offer(5);  // the best moved on: the member's plan is now 2.4x behind it
  CHECK(best.members_quiet(1, 1));
}

TEST_CASE("a warm start: a neighbouring problem's plans seed auto's refinement, and the result is never worse than them") {
  // A mid-size instance; the warm plan is auto's best with a long budget. A search of 20 ms
  // with only uniform beside the refinement does not reach it alone (checked, the premise),
  // and reaches it, or better, when the plan is given as a warm start.
  auto in = bench::midsize_instance(7, test::catalog());
  INFO(in.description);
  cost::ComputeModel cm(in.model, {});
  search::Options longer;
  longer.time_budget_s = 4;
  auto best = search::run("auto", in.model, in.cluster, cm, longer);
  REQUIRE(best.ok());
  const double warm_s = best->plans.front().plan.predicted->iteration_s;
  search::Options quick;
  quick.time_budget_s = 0.02;
  quick.auto_algorithms = {"uniform"};
  auto cold = search::run("auto", in.model, in.cluster, cm, quick);
  REQUIRE(cold.ok());
  CHECK(cold->plans.front().plan.predicted->iteration_s > warm_s * 1.001);
  quick.warm_start = {best->plans.front().plan};
  auto warm = search::run("auto", in.model, in.cluster, cm, quick);
  REQUIRE(warm.ok());
  check_plan(warm->plans.front(), cm);
  CHECK(warm->plans.front().plan.predicted->iteration_s <= warm_s * (1 + 1e-9));
  // Plans that do not fit the problem (another cluster's subclusters) are left out, not an error.
  Plan elsewhere = best->plans.front().plan;
  for (auto& p : elsewhere.pipelines)
    for (auto& s : p.stages) s.subcluster = "nowhere";
  quick.warm_start = {elsewhere};
  CHECK(search::run("auto", in.model, in.cluster, cm, quick).ok());
}
