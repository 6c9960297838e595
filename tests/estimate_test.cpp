// The search's estimate (search/evaluator) against the simulator (predict): both cost a stage
// with the same functions (predict/stage_cost), so the estimate of a plan must stay close to
// its simulated iteration time. Random instances, random layouts, each schedule kind.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "../bench/instances.hpp"
#include "predict/predict.hpp"
#include "search/evaluator.hpp"
#include "test_util.hpp"

using namespace het;

namespace {

// A random admissible layout of the instance: k pipelines, 1-4 stages on random subclusters,
// random (dp, cp, tp) per stage; nothing when the draw does not fit.
std::optional<search::Layout> random_layout(const search::Evaluator& eval, std::mt19937_64& rng,
                                            const std::vector<ScheduleKind>& kinds = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                                                                      ScheduleKind::eager_1f1b, ScheduleKind::h_1f1b,
                                                                                      ScheduleKind::virtual_1f1b}) {
  const ClusterSpec& c = eval.cluster();
  const ModelSpec& m = eval.model();
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  search::Layout l;
  l.pipelines = 1 << uniform(0, 2);
  l.micro_batch_size = 1 << uniform(0, 2);
  l.schedule = kinds[std::size_t(uniform(0, int(kinds.size()) - 1))];
  const int S = uniform(1, std::min(4, eval.num_units()));
  std::vector<int> left;
  for (const auto& s : c.subclusters) left.push_back(s.num_devices());
  for (int i = 0; i < S; ++i) {
    search::StageShape sh;
    sh.sub = uniform(0, int(c.subclusters.size()) - 1);
    sh.tp = 1 << uniform(0, 2);
    sh.dp = 1 << uniform(0, 1);
    sh.cp = uniform(0, 3) == 0 ? 2 : 1;
    if (m.num_attention_heads % sh.tp || m.num_kv_heads % sh.tp) sh.tp = 1;
    if (left[std::size_t(sh.sub)] < l.pipelines * sh.devices()) return std::nullopt;
    left[std::size_t(sh.sub)] -= l.pipelines * sh.devices();
    l.stages.push_back(sh);
  }
  if (!eval.admissible(l)) return std::nullopt;
  return l;
}

// Random instances seed_base, seed_base + 1, .. (at most 400), and on each up to two random
// layouts that have a best split: calls fn(instance, compute model, evaluator, layout, best
// split) until done() says enough.
// With `slow_link`, the links between subclusters are that slow (bytes/s) and the layouts of
// `kinds` only.
template <class Done, class Fn>
void for_random_splits(std::uint64_t seed_base, Done done, Fn fn, double slow_link = 0, std::vector<ScheduleKind> kinds = {}) {
  for (int seed = 0; !done() && seed < 400; ++seed) {
    auto in = bench::random_instance(seed_base + std::uint64_t(seed), test::catalog());
    if (slow_link > 0) in.cluster.default_link = LinkSpec{slow_link, 1e-3};
    const cost::ComputeModel cm(in.model, {});
    const search::Evaluator eval(in.model, in.cluster, cm, in.model.training.recompute, Granularity::layer, {});
    std::mt19937_64 rng{std::uint64_t(seed)};
    for (int draw = 0, found = 0; draw < 40 && found < 2; ++draw) {
      const auto layout = kinds.empty() ? random_layout(eval, rng) : random_layout(eval, rng, kinds);
      if (!layout) continue;
      const auto best = eval.best_split(*layout);
      if (!best) continue;
      ++found;
      fn(in, cm, eval, *layout, *best);
    }
  }
}

}  // namespace

// Measured (241 plans, 2026-12-06, gpt's tied bucket where the runtime reduces it): median 1.000,
// 239 within 5%, min 0.993, max 1.083 (the rest: gradient sync and optimizer steps, which the
// estimate takes per stage, the simulator per group). With the last stage's sync from its own
// last backward (2026-12-05): 238, min 0.941 (gpt plans whose tied bucket waited for stage 0).
// With eq. 12's closed form (2026-12-01):
// 232 within 5%, min 0.761, max 1.111, the worst a 1f1b plan of two 0.136 s hops around
// 0.01-0.02 s stages whose round trips compound; before h-1f1b's warm-ups came from the
// split's own times: 231, min 0.662.
TEST_CASE("property: the search's estimate is within 5% of the simulator on 97% of 200+ random plans") {
  std::vector<double> ratios;
  double worst = 0;
  std::string worst_what;
  for_random_splits(9000, [&] { return ratios.size() >= 240; },
                    [&](const bench::Instance& in, const cost::ComputeModel& cm, const search::Evaluator& eval,
                        const search::Layout& layout, const search::Candidate& c) {
                      const Plan plan = eval.to_plan(c);
                      const auto predicted = predict::predict(plan, cm, eval.predict_options());
                      REQUIRE(predicted.ok());
                      const double ratio = c.estimate_s / predicted->plan.predicted->iteration_s;
                      ratios.push_back(ratio);
                      if (std::abs(std::log(ratio)) > std::abs(std::log(worst > 0 ? worst : 1))) {
                        worst = ratio;
                        worst_what = in.description + ", " + to_string(layout.schedule) + ", " +
                                     std::to_string(layout.stages.size()) + " stages, " + std::to_string(layout.pipelines) +
                                     " pipelines";
                      }
                    });
  std::sort(ratios.begin(), ratios.end());
  const double median = ratios[ratios.size() / 2];
  const double p95 = ratios[ratios.size() * 95 / 100], p5 = ratios[ratios.size() * 5 / 100];
  INFO(ratios.size() << " plans, estimate / simulated: median " << median << ", 5th percentile " << p5 << ", 95th "
                     << p95 << ", min " << ratios.front() << ", max " << ratios.back() << "; worst " << worst_what);
  const auto within = std::count_if(ratios.begin(), ratios.end(), [](double r) { return std::abs(r - 1) <= 0.05; });
  INFO(within << " within 5%");
  CHECK(ratios.size() >= 200);
  CHECK(std::abs(median - 1) <= 0.01);
  CHECK(double(within) >= 0.97 * double(ratios.size()));
  CHECK(ratios.front() >= 0.98);
  CHECK(ratios.back() <= 1.1);
}

// Issue 20: evaluate() with a cutoff rules a layout out after one feasibility test when no
// split could estimate below it ((m − 1)·t_max plus each unit's fastest time and the hops). The
// pruning must be exact: with a cutoff just above a layout's best split it finds that same
// split, and with one just below it finds nothing and says the layout was cut (not that it did
// not fit). Random instances and layouts, every schedule kind.
TEST_CASE("property: the search's cutoff never loses a split that beats it") {
  int checked = 0;
  for_random_splits(7000, [&] { return checked >= 150; },
                    [&](const bench::Instance& in, const cost::ComputeModel&, const search::Evaluator& eval,
                        const search::Layout& layout, const search::Candidate& best) {
                      ++checked;
                      INFO(in.description << ", " << to_string(layout.schedule) << ", " << layout.stages.size() << " stages, "
                                          << layout.pipelines << " pipelines, best " << best.estimate_s);
                      bool cut = false;
                      const auto above = eval.evaluate(layout, {layout.schedule}, nullptr, best.estimate_s * (1 + 1e-9), &cut);
                      REQUIRE(above.size() == 1);
                      CHECK(above.front().estimate_s == Approx(best.estimate_s).epsilon(1e-12));
                      CHECK(above.front().first_unit == best.first_unit);
                      CHECK_FALSE(cut);
                      const auto below = eval.evaluate(layout, {layout.schedule}, nullptr, best.estimate_s * (1 - 1e-6), &cut);
                      for (const auto& c : below) CHECK(c.estimate_s >= best.estimate_s * (1 - 1e-12));  // never better than the best
                      if (below.empty()) CHECK(cut);
                    });
  CHECK(checked >= 150);
}

// Issue 20: evaluate() tries 1F1B first and, where its feasibility test at the cutoff's t_max
// fails, no other schedule (1F1B's warm-ups are each schedule's least, and more micro-batches in
// flight need more memory). That must lose nothing: on random layouts and cutoffs around their
// best splits, all five schedules at once give what each gives alone, in the same order.
TEST_CASE("property: evaluating the schedules together gives what each gives alone, at any cutoff") {
  const std::vector<ScheduleKind> kinds = {ScheduleKind::gpipe, ScheduleKind::h_1f1b, ScheduleKind::one_f_one_b,
                                           ScheduleKind::eager_1f1b, ScheduleKind::virtual_1f1b};
  int checked = 0, one_f_one_b_cut = 0;
  for_random_splits(7300, [&] { return checked >= 400; },
                    [&](const bench::Instance& in, const cost::ComputeModel&, const search::Evaluator& eval,
                        const search::Layout& layout, const search::Candidate& best) {
                      for (double f : {0.7, 0.9, 0.99, 1.0 + 1e-9, 1.05, 1.3}) {
                        ++checked;
                        const double cutoff = best.estimate_s * f;
                        INFO(in.description << ", " << layout.stages.size() << " stages, " << layout.pipelines
                                            << " pipelines, cutoff " << cutoff);
                        bool cut = false;
                        const auto together = eval.evaluate(layout, kinds, nullptr, cutoff, &cut);
                        std::vector<search::Candidate> alone;
                        bool any_cut = false;
                        for (ScheduleKind k : kinds) {
                          bool cut_k = false;
                          for (auto& c : eval.evaluate(layout, {k}, nullptr, cutoff, &cut_k)) alone.push_back(std::move(c));
                          any_cut |= cut_k;
                          if (k == ScheduleKind::one_f_one_b && cut_k) ++one_f_one_b_cut;
                        }
                        REQUIRE(together.size() == alone.size());
                        for (std::size_t i = 0; i < alone.size(); ++i) {
                          CHECK(together[i].layout.schedule == alone[i].layout.schedule);
                          CHECK(together[i].estimate_s == alone[i].estimate_s);
                          CHECK(together[i].first_unit == alone[i].first_unit);
                        }
                        CHECK(cut == any_cut);
                      }
                    });
  INFO("1F1B cut at " << one_f_one_b_cut << " of " << checked << " cutoffs");
  CHECK(checked >= 400);
  CHECK(one_f_one_b_cut >= checked / 4);  // the case the shortcut is for, often
}

// Issue 20: the split search visits only the first units a stage can start at (its forward
// sweep) and the DP only those. That must lose no split: on random small instances and layouts,
// the free search finds a split exactly when one of all C(U-1, S-1) splits (each evaluated
// fixed) fits, and its estimate is within the t_max ladder's resolution of theirs (rungs 5%
// apart, the first at +1%: a split of t_max up to 1.05x the best one's may stand for it).
TEST_CASE("property: the split search finds a split whenever one fits, as good as the best of all splits") {
  int compared = 0, none = 0;
  for (int seed = 0; seed < 400 && compared < 120; ++seed) {
    const auto in = bench::random_instance(9100 + std::uint64_t(seed), test::catalog());
    const cost::ComputeModel cm(in.model, {});
    const search::Evaluator eval(in.model, in.cluster, cm, in.model.training.recompute, Granularity::layer, {});
    const int U = eval.num_units();
    if (U > 18) continue;
    std::mt19937_64 rng{std::uint64_t(seed)};
    for (int draw = 0; draw < 20; ++draw) {
      const auto layout = random_layout(eval, rng);
      if (!layout) continue;
      const int S = static_cast<int>(layout->stages.size());
      double best_fixed = 1e300;
      std::vector<int> first(S, 0);
      // Every split: first units 0 = f_0 < f_1 < ... < f_{S-1} <= U - 1.
      std::function<void(int)> each = [&](int i) {
        if (i == S) {
          for (const auto& c : eval.evaluate(*layout, {layout->schedule}, &first)) best_fixed = std::min(best_fixed, c.estimate_s);
          return;
        }
        for (first[i] = first[i - 1] + 1; first[i] <= U - (S - i); ++first[i]) each(i + 1);
      };
      each(1);
      const auto free = eval.evaluate(*layout, {layout->schedule});
      INFO(in.description << ", " << to_string(layout->schedule) << ", " << S << " stages, " << layout->pipelines
                          << " pipelines, best of all splits " << best_fixed);
      CHECK(free.empty() == (best_fixed == 1e300));
      if (free.empty()) {
        ++none;
        continue;
      }
      CHECK(free.front().estimate_s >= best_fixed * (1 - 1e-9));  // one of the splits
      CHECK(free.front().estimate_s <= best_fixed * 1.06);
      ++compared;
    }
  }
  INFO(compared << " layouts compared, " << none << " with no split that fits");
  CHECK(compared >= 120);
}

// Issue 20: behind a link slower than the stages, a stage that runs all its forwards before its
// first backward (every stage of gpipe; the stages before a slow hop under h-1f1b, whose warm-ups
// grow with c/t_max) has the link carry the m activations, then the m gradients: the iteration is
// that chain, 2·m·c, not eq. 12's (m − 1)·c with the two directions overlapped. Random instances
// whose subclusters are joined by 100 Mbit/s, random layouts of those two schedules.
TEST_CASE("property: behind a slow link the estimate of gpipe and h-1f1b plans follows the simulator") {
  std::vector<double> ratios;
  for_random_splits(
      9300, [&] { return ratios.size() >= 120; },
      [&](const bench::Instance&, const cost::ComputeModel& cm, const search::Evaluator& eval, const search::Layout& layout,
          const search::Candidate& c) {
        bool crosses = false;
        for (std::size_t i = 0; i + 1 < layout.stages.size(); ++i) crosses |= layout.stages[i].sub != layout.stages[i + 1].sub;
        if (!crosses) return;
        const auto predicted = predict::predict(eval.to_plan(c), cm, eval.predict_options());
        REQUIRE(predicted.ok());
        ratios.push_back(c.estimate_s / predicted->plan.predicted->iteration_s);
      },
      100e6 / 8, {ScheduleKind::gpipe, ScheduleKind::h_1f1b});
  std::sort(ratios.begin(), ratios.end());
  const auto within = std::count_if(ratios.begin(), ratios.end(), [](double r) { return std::abs(r - 1) <= 0.05; });
  INFO(ratios.size() << " plans crossing the link, estimate / simulated: median " << ratios[ratios.size() / 2] << ", min "
                     << ratios.front() << ", max " << ratios.back() << "; " << within << " within 5%");
  // Measured: median 1.000, 120 of 120 within 5%, min 0.996 (the split's pipeline simulated,
  // 2026-12-05); eq. 12 with the chain of a slow hop: 115 within 5%, min 0.54; eq. 12 alone
  // (and warm-ups from the searched t_max bound): median 0.688, 47 within 5%, min 0.51.
  REQUIRE(ratios.size() >= 120);
  CHECK(std::abs(ratios[ratios.size() / 2] - 1) <= 0.01);
  CHECK(double(within) >= 0.98 * double(ratios.size()));
  CHECK(ratios.front() >= 0.95);
  CHECK(ratios.back() <= 1.05);
}

// The search's tables hold a stage as predict does (cost::stage_memory: model state, activations,
// the stage's own buffers per micro-batch in flight, the backward's temporaries), leaving out only
// the transport's read-ahead, which predict's cap on warm-ups leaves out too. Before the buffers
// and temporaries were in the tables (issue 20, 2026-12-05), HAPT GPT-15B's rotated 1f1b layout
// fit two micro-batches on a stage where predict capped it at one: estimated 30.47 s, simulated
// 59.44 s.
TEST_CASE("property: the search's memory of a stage is predict's, at predict's warm-ups") {
  int stages = 0;
  for_random_splits(9500, [&] { return stages >= 300; },
                    [&](const bench::Instance& in, const cost::ComputeModel& cm, const search::Evaluator& eval,
                        const search::Layout& layout, const search::Candidate& c) {
                      const auto predicted = predict::predict(eval.to_plan(c), cm, eval.predict_options());
                      REQUIRE(predicted.ok());
                      const int U = eval.num_units(), S = static_cast<int>(layout.stages.size());
                      std::vector<int> offset(eval.cluster().subclusters.size(), 0);
                      for (int i = 0; i < S; ++i) {
                        const search::StageShape& sh = layout.stages[i];
                        const int k = c.first_unit[i], e = i + 1 < S ? c.first_unit[i + 1] - 1 : U - 1;
                        const search::StageTable& t = eval.table(layout, i, offset[sh.sub], c.recompute[i]);
                        offset[sh.sub] += layout.pipelines * sh.devices();
                        const predict::StageDetail& d = predicted->stages[0][i];
                        INFO(in.description << ", stage " << i << " of " << S << ", warm-up " << d.warmup);
                        CHECK(t.memory(k, e, d.warmup, e == U - 1) ==
                              Approx(d.memory.total() - d.memory.read_ahead).epsilon(1e-9));
                        ++stages;
                      }
                    });
}
