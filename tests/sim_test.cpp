#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "schedule/schedule.hpp"
#include "sim/sim.hpp"

using namespace het;
using namespace het::sim;

namespace {

// A pipeline of S equal stages (f, b) with symmetric transfer c between neighbours.
PipelineInput pipeline(int S, int m, double f, double b, double c, std::vector<int> warmup) {
  PipelineInput p;
  p.num_microbatches = m;
  for (int s = 0; s < S; ++s) p.stages.push_back({f, b, c, c, 0, ""});
  p.warmup = std::move(warmup);
  return p;
}

std::vector<int> warmups(ScheduleKind kind, int S, int m, double t, double c) {
  schedule::WarmupInput in;
  in.kind = kind;
  in.num_microbatches = m;
  in.stage_s.assign(S, t);
  in.transfer_s.assign(S - 1, c);
  return schedule::warmup_counts(in);
}

double iteration(const PipelineInput& p) {
  SimInput in;
  in.pipelines = {p};
  auto r = simulate(in);
  REQUIRE(r.ok());
  return r->iteration_s;
}

}  // namespace

TEST_CASE("homogeneous 1f1b with free transfers takes (m+S-1)(f+b)") {
  for (auto [S, m] : {std::pair{1, 1}, {2, 8}, {4, 16}, {8, 64}, {16, 32}}) {
    INFO("S=" << S << " m=" << m);
    auto p = pipeline(S, m, 1.0, 2.0, 0.0, warmups(ScheduleKind::one_f_one_b, S, m, 3, 0));
    CHECK(iteration(p) == Approx((m + S - 1) * 3.0).epsilon(0.001));
  }
}

TEST_CASE("gpipe takes the same time but holds all m micro-batches on every stage") {
  const int S = 4, m = 12;
  SimInput in;
  in.pipelines = {pipeline(S, m, 1.0, 2.0, 0.0, warmups(ScheduleKind::gpipe, S, m, 3, 0)),
                  pipeline(S, m, 1.0, 2.0, 0.0, warmups(ScheduleKind::one_f_one_b, S, m, 3, 0))};
  auto r = simulate(in);
  REQUIRE(r.ok());
  CHECK(r->pipelines[0].makespan_s == Approx((m + S - 1) * 3.0).epsilon(0.001));
  CHECK(r->pipelines[1].makespan_s == Approx((m + S - 1) * 3.0).epsilon(0.001));
  for (int s = 0; s < S; ++s) {
    CHECK(r->pipelines[0].stages[s].max_in_flight == m);
    CHECK(r->pipelines[1].stages[s].max_in_flight == S - s);
  }
  CHECK(r->bubble_fraction == Approx(1 - double(m) / (m + S - 1)).epsilon(0.001));
}

TEST_CASE("two stages with transfer c: 1f1b is slowed as HAPT Lemma 2 says") {
  // K-block of 1f1b (K = 2): max{2t, 2(t + c)} = 2(t + c) for any c > 0, so ~m(t + c) in all.
  const int m = 400;
  const double f = 1, b = 2, t = f + b;
  for (double c : {0.3, 1.0, 2.5}) {
    INFO("c=" << c);
    auto p = pipeline(2, m, f, b, c, warmups(ScheduleKind::one_f_one_b, 2, m, t, c));
    CHECK(iteration(p) == Approx(m * (t + c)).epsilon(0.01));
  }
}

TEST_CASE("eager-1f1b hides transfers up to t/2 only, h-1f1b up to t") {
  const int m = 400;
  const double f = 1, b = 2, t = f + b;
  auto time = [&](ScheduleKind kind, double c) {
    return iteration(pipeline(2, m, f, b, c, warmups(kind, 2, m, t, c)));
  };
  const double hidden = (m + 1) * t;  // no transfer cost in the steady phase
  // Eager (K = 3): block max{3t, 2(t+c)}: hidden for c <= t/2, slowed beyond.
  CHECK(time(ScheduleKind::eager_1f1b, 0.5 * t) == Approx(hidden).epsilon(0.01));
  CHECK(time(ScheduleKind::eager_1f1b, 0.9 * t) > 1.15 * hidden);
  // H-1F1B (K = 4 for c > t/2): hidden up to c = t.
  CHECK(time(ScheduleKind::h_1f1b, 0.9 * t) == Approx(hidden).epsilon(0.01));
  CHECK(time(ScheduleKind::h_1f1b, 1.0 * t) == Approx(hidden).epsilon(0.01));
}

TEST_CASE("cross-subcluster transfers: 1f1b leaves them exposed, h-1f1b hides them") {
  const int m = 200;
  const double f = 1, b = 2, t = 3, c = 2.0;
  auto overlap = [&](ScheduleKind kind) {
    SimInput in;
    in.pipelines = {pipeline(2, m, f, b, c, warmups(kind, 2, m, t, c))};
    in.pipelines[0].stages[0].cross_to_next = true;
    auto r = simulate(in);
    REQUIRE(r.ok());
    return r->cross_overlap;
  };
  CHECK(overlap(ScheduleKind::one_f_one_b) < 0.7);
  CHECK(overlap(ScheduleKind::h_1f1b) > 0.98);
  SimInput none;
  none.pipelines = {pipeline(2, 4, f, b, c, {2, 1})};
  CHECK(simulate(none)->cross_overlap == 1);  // no cross-subcluster hop
}

TEST_CASE("h-1f1b matches HAPT eq. 13 within 1% (equal stages) and 3% (unequal stages)") {
  // T = Σ_i (t_i + 2 c_i) + (B - 1) t_max, for c_i <= t_max. Exact for equal stages; for
  // unequal ones eq. 13 "stretches" the faster stages (§4.2.4), an approximation.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const bool equal = trial % 2 == 0;
    const int S = std::uniform_int_distribution<int>(2, 6)(rng);
    const int m = std::uniform_int_distribution<int>(64, 256)(rng);
    std::uniform_real_distribution<double> u(0.5, 1.0);
    PipelineInput p;
    p.num_microbatches = m;
    schedule::WarmupInput w;
    w.kind = ScheduleKind::h_1f1b;
    w.num_microbatches = m;
    for (int s = 0; s < S; ++s) {
      double f = equal ? 1.0 : u(rng), b = 2 * f;
      p.stages.push_back({f, b, 0, 0, 0, ""});
      w.stage_s.push_back(f + b);
    }
    const double t_max = *std::max_element(w.stage_s.begin(), w.stage_s.end());
    double expected = (m - 1) * t_max;
    for (int s = 0; s < S; ++s) {
      // Transfers above ε·t_max (h-1f1b leaves smaller ones exposed by design, see below).
      double c = s + 1 < S ? std::uniform_real_distribution<double>(0.02 * t_max, t_max)(rng) : 0;
      p.stages[s].send_forward_s = p.stages[s].send_backward_s = c;
      if (s + 1 < S) w.transfer_s.push_back(c);
      expected += w.stage_s[s] + 2 * c;
    }
    p.warmup = schedule::warmup_counts(w);
    INFO("trial " << trial << " S=" << S << " m=" << m);
    if (equal) {
      CHECK(iteration(p) == Approx(expected).epsilon(0.01));
    } else {
      CHECK(iteration(p) == Approx(expected).epsilon(0.03));
    }
  }
}

TEST_CASE("h-1f1b treats transfers up to ε·t_max as free, exposing at most 2c/N_s per micro-batch") {
  const int m = 200;
  const double t = 3, c = 0.02;  // c <= ε·t = 0.03: δ = 1, as plain 1f1b
  auto w = warmups(ScheduleKind::h_1f1b, 2, m, t, c);
  CHECK(w == std::vector<int>{2, 1});
  const double eq13 = (m + 1) * t + 2 * c;
  const double sim = iteration(pipeline(2, m, 1, 2, c, w));
  CHECK(sim > eq13);
  CHECK(sim <= eq13 + m * 2 * c / w[0] + 1e-9);
}

TEST_CASE("property: random warm-ups either run every micro-batch in order or are reported as a deadlock") {
  std::mt19937 rng(3);
  int deadlocks = 0, runs = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int S = std::uniform_int_distribution<int>(1, 8)(rng);
    const int m = std::uniform_int_distribution<int>(1, 24)(rng);
    std::vector<int> w(S);
    for (auto& x : w) x = std::uniform_int_distribution<int>(1, m + 2)(rng);
    SimInput in;
    in.trace = true;
    in.pipelines = {pipeline(S, m, 1.0, 2.0, 0.25, w)};
    auto r = simulate(in);
    bool non_increasing = true;
    for (int s = 0; s + 1 < S; ++s) non_increasing &= std::min(w[s], m) >= std::min(w[s + 1], m);
    if (!r) {
      ++deadlocks;
      CHECK_FALSE(non_increasing);
      CHECK_THAT(r.errors()[0].message, Catch::Contains("deadlocks"));
      continue;
    }
    ++runs;
    CHECK(non_increasing);
    // Each stage's compute events never overlap and each micro-batch's F precedes its B.
    std::map<std::string, double> busy_until;
    std::map<std::string, double> f_end;
    for (const auto& e : r->trace) {
      if (e.track.find("compute") == std::string::npos) continue;
      CHECK(e.start_s >= busy_until[e.track] - 1e-9);
      busy_until[e.track] = e.start_s + e.duration_s;
      if (e.name[0] == 'F') f_end[e.track + e.name.substr(1)] = e.start_s + e.duration_s;
      if (e.name[0] == 'B') CHECK(e.start_s >= f_end[e.track + e.name.substr(1)]);
    }
    CHECK(r->iteration_s >= m * 3.0 - 1e-9);  // never faster than one stage's work
  }
  CHECK(deadlocks > 0);
  CHECK(runs > 0);
}

TEST_CASE("gradient sync overlaps the last backward, and what is not hidden is exposed") {
  auto p = pipeline(2, 8, 1.0, 2.0, 0.0, {2, 1});
  SimInput in;
  in.pipelines = {p};
  in.sync_groups = {{{{0, 0}}, 1.5}, {{{0, 1}}, 5.0}};
  in.overlap_sync = true;
  auto r = simulate(in);
  REQUIRE(r.ok());
  const double makespan = 9 * 3.0;
  CHECK(r->pipelines[0].makespan_s == Approx(makespan));
  // Stage 0's last backward ends at the makespan; its 1.5 s sync starts with that backward
  // (2 s long), so it is hidden. Stage 1's last backward ends one backward earlier
  // (makespan - 2) and started at makespan - 4; its 5 s sync ends at makespan + 1.
  CHECK(r->pipelines[0].stages[0].sync_end_s == Approx(makespan));
  CHECK(r->pipelines[0].stages[1].sync_end_s == Approx(makespan + 1));
  CHECK(r->iteration_s == Approx(makespan + 1));
  CHECK(r->exposed_sync_s == Approx(1));
  in.overlap_sync = false;  // the sync waits for the last backward: makespan - 2 + 5
  auto r2 = simulate(in);
  REQUIRE(r2.ok());
  CHECK(r2->iteration_s == Approx(makespan + 3));
}

TEST_CASE("pipelines of a plan run side by side, the slowest sets the iteration") {
  SimInput in;
  in.pipelines = {pipeline(2, 8, 1.0, 2.0, 0.0, {2, 1}), pipeline(3, 4, 1.0, 1.0, 0.0, {3, 2, 1})};
  in.sync_groups = {{{{0, 0}, {1, 0}}, 0.0}};
  auto r = simulate(in);
  REQUIRE(r.ok());
  CHECK(r->pipelines[0].makespan_s == Approx(27));
  CHECK(r->pipelines[1].makespan_s == Approx(12));
  CHECK(r->iteration_s == Approx(27));
}

TEST_CASE("the Chrome trace names every event with its track") {
  SimInput in;
  in.trace = true;
  in.pipelines = {pipeline(2, 2, 1.0, 2.0, 0.5, {2, 1})};
  auto r = simulate(in);
  REQUIRE(r.ok());
  auto text = chrome_trace(r->trace);
  auto j = nlohmann::json::parse(text);
  int complete = 0;
  for (const auto& e : j["traceEvents"]) complete += e["ph"] == "X";
  CHECK(complete == 2 * 2 * 2 + 2 + 2);  // F and B per stage and micro-batch, C^F and C^B per micro-batch
  CHECK_THAT(text, Catch::Contains("p0 s0 compute") && Catch::Contains("p0 s0->s1"));
}

TEST_CASE("equal pipelines are simulated once without a trace, with the very results of simulating each") {
  // Data-parallel replicas give equal pipelines; the simulator reuses the first one's report
  // and cross-subcluster steps. With a trace it simulates each; both must agree exactly.
  PipelineInput a = pipeline(3, 16, 1.0, 2.0, 0.4, warmups(ScheduleKind::h_1f1b, 3, 16, 3.0, 0.4));
  a.stages[0].cross_to_next = true;
  a.stages[1].forward_s = 1.3;
  PipelineInput b = pipeline(2, 16, 1.5, 2.5, 0.7, warmups(ScheduleKind::one_f_one_b, 2, 16, 4.0, 0.7));
  b.stages[0].cross_to_next = true;
  SimInput in;
  in.pipelines = {a, b, a, a, b};
  for (std::size_t k = 0; k < in.pipelines.size(); ++k)  // names differ per pipeline; they do not count
    for (auto& st : in.pipelines[k].stages) st.name = "p" + std::to_string(k);
  in.sync_groups = {{{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}}, 0.5}, {{{0, 2}, {2, 2}, {3, 2}}, 0.25}};
  auto once = simulate(in);
  in.trace = true;
  auto each = simulate(in);
  REQUIRE(once.ok());
  REQUIRE(each.ok());
  CHECK(once->iteration_s == each->iteration_s);
  CHECK(once->bubble_fraction == each->bubble_fraction);
  CHECK(once->exposed_sync_s == each->exposed_sync_s);
  CHECK(once->cross_overlap == each->cross_overlap);
  CHECK(once->cross_overlap < 1);  // the cross-subcluster steps counted
  REQUIRE(once->pipelines.size() == each->pipelines.size());
  for (std::size_t k = 0; k < once->pipelines.size(); ++k) {
    CHECK(once->pipelines[k].makespan_s == each->pipelines[k].makespan_s);
    REQUIRE(once->pipelines[k].stages.size() == each->pipelines[k].stages.size());
    for (std::size_t s = 0; s < once->pipelines[k].stages.size(); ++s) {
      const StageReport &x = once->pipelines[k].stages[s], &y = each->pipelines[k].stages[s];
      CHECK(x.compute_s == y.compute_s);
      CHECK(x.send_busy_s == y.send_busy_s);
      CHECK(x.last_backward_end_s == y.last_backward_end_s);
      CHECK(x.sync_end_s == y.sync_end_s);
      CHECK(x.finish_s == y.finish_s);
      CHECK(x.idle_s == y.idle_s);
      CHECK(x.max_in_flight == y.max_in_flight);
    }
  }
}
