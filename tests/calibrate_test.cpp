// fidelity::calibrate on measured traces made by the simulator itself: a "run" predicted with a
// known profile must calibrate a wrong profile back to it exactly, whatever the dilation, and
// then predict another plan as the known profile does. (The measured loop on this machine is in
// timing_test.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "cost/compute.hpp"
#include "fidelity/calibrate.hpp"
#include "fidelity/fidelity.hpp"
#include "predict/predict.hpp"
#include "process.hpp"
#include "test_util.hpp"
#include "validation/inputs.hpp"

using namespace het;

namespace {

Plan load(const std::string& plan) {
  InputFiles files;
  files.plan = HET_SOURCE_DIR "/tests/data/plans/" + plan;
  files.model = HET_SOURCE_DIR "/configs/models/tiny-gpt.yaml";
  files.cluster = HET_SOURCE_DIR "/configs/clusters/tiny-cpu.yaml";
  auto loaded = load_plan_inputs(files);
  if (!loaded) throw std::runtime_error(to_string(loaded.errors()));
  return loaded->plan;
}

// A profile of tiny-gpt: per-unit times linear in the micro-batch size with an intercept (so a
// wrong scale cannot hide in the interpolation), `slow` times slower.
ProfileSpec profile(const Plan& plan, const std::string& device, double slow) {
  ProfileSpec p;
  p.device = device;
  p.model = profile_model(plan.model);
  for (UnitKind u : {UnitKind::embedding, UnitKind::layer, UnitKind::head})
    for (int b : {1, 2, 4}) {
      const double per = u == UnitKind::layer ? 400e-6 : u == UnitKind::head ? 120e-6 : 3e-6;
      ProfileRow r;
      r.unit = u, r.micro_batch_size = b, r.seq_length = plan.model.seq_length;
      r.forward = slow * (50e-6 + per * b), r.backward = slow * (80e-6 + 1.5 * per * b);
      p.units.push_back(r);
    }
  p.optimizer_step = {{1, std::nullopt, slow * 300e-6}};
  return p;
}

ProfileSpec times(ProfileSpec p, double x) {
  for (auto& r : p.units) r.forward *= x, r.backward *= x;
  for (auto& s : p.optimizer_step) s.time *= x;
  return p;
}

predict::Outcome predict_run(const Plan& plan, const std::vector<ProfileSpec>& profiles, double dilation) {
  Plan dilated = plan;
  dilated.cluster = fidelity::dilate(plan.cluster, dilation);
  std::vector<ProfileSpec> slow;
  for (const auto& p : profiles) slow.push_back(fidelity::dilate(p, dilation));
  cost::ComputeModel compute(plan.model, slow);
  predict::Options o;
  o.trace = true;
  auto out = predict::predict(dilated, compute, o);
  REQUIRE(out);
  return *out;
}

// The simulator's iteration as a run-local trace of `steps` steps: per stage track, a "step"
// event around a copy of the iteration's events.
std::vector<sim::TraceEvent> as_measured(const predict::Outcome& o, int steps) {
  std::vector<sim::TraceEvent> out;
  const double period = o.sim.iteration_s * 1.01;
  for (int k = 0; k < steps; ++k) {
    for (std::size_t p = 0; p < o.plan.pipelines.size(); ++p)
      for (std::size_t s = 0; s < o.plan.pipelines[p].stages.size(); ++s)
        out.push_back({"p" + std::to_string(p) + " s" + std::to_string(s) + " compute", "step", k * period, o.sim.iteration_s});
    for (auto e : o.sim.trace) {
      if (e.track.find(" compute") == std::string::npos) continue;  // the transfers' tracks
      e.start_s += k * period;
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("calibrate fits a profile twice too slow back to the one the run was measured with, dilated or not") {
  const Plan plan = load("tiny-cpu-pipeline.plan.json");
  const std::vector<ProfileSpec> truth = {profile(plan, "cpu-fast", 1), profile(plan, "cpu-slow", 4)};
  for (double dilation : {1.0, 4.0}) {
    CAPTURE(dilation);
    const auto measured = as_measured(predict_run(plan, truth, dilation), 3);
    fidelity::CalibrateOptions o;
    o.time_dilation = dilation;
    auto c = fidelity::calibrate(plan, {times(truth[0], 2), times(truth[1], 2)}, measured, o);
    REQUIRE(c);
    REQUIRE(c->devices.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      const auto& d = c->devices[i];
      CHECK(d.device == truth[i].device);
      CHECK(d.stages == 1);
      CHECK(d.forward.value == Approx(0.5).epsilon(1e-9));
      CHECK(d.backward.value == Approx(0.5).epsilon(1e-9));
      CHECK(d.optimizer.value == Approx(0.5).epsilon(1e-9));
      CHECK(d.forward.stages == 1);
      REQUIRE(d.profile);
      REQUIRE(d.profile->units.size() == truth[i].units.size());
      for (std::size_t r = 0; r < truth[i].units.size(); ++r) {  // the undilated truth
        CHECK(d.profile->units[r].forward == Approx(truth[i].units[r].forward).epsilon(1e-9));
        CHECK(d.profile->units[r].backward == Approx(truth[i].units[r].backward).epsilon(1e-9));
      }
      CHECK(d.profile->optimizer_step[0].time == Approx(truth[i].optimizer_step[0].time).epsilon(1e-9));
    }
    CHECK(c->before.ratio() > 1.8);  // all but the transfers twice as long
    CHECK(c->after.ratio() == Approx(1).epsilon(1e-9));
    CHECK(c->after.steps_used == 2);

    // Another plan (3 stages, micro-batches of 4): predicted as with the truth.
    const Plan other = load("tiny-cpu-3-stages.plan.json");
    const double calibrated = predict_run(other, {*c->devices[0].profile, *c->devices[1].profile}, 1).sim.iteration_s;
    CHECK(calibrated == Approx(predict_run(other, truth, 1).sim.iteration_s).epsilon(1e-9));
  }
}

TEST_CASE("calibrate fits a device type's stages together, weighted by their units, and leaves analytic ones alone") {
  const Plan plan = load("tiny-cpu-3-stages.plan.json");  // fast, fast, slow
  const std::vector<ProfileSpec> truth = {profile(plan, "cpu-fast", 1), profile(plan, "cpu-slow", 4)};
  const auto measured = as_measured(predict_run(plan, truth, 1), 2);
  SECTION("two stages of one type agree: one factor") {
    auto c = fidelity::calibrate(plan, {times(truth[0], 3), truth[1]}, measured, {});
    REQUIRE(c);
    CHECK(c->devices[0].stages == 2);
    CHECK(c->devices[0].forward.stages == 2);
    CHECK(c->devices[0].forward.value == Approx(1.0 / 3).epsilon(1e-9));
    CHECK(c->devices[1].forward.value == Approx(1).epsilon(1e-9));
    CHECK(c->after.ratio() == Approx(1).epsilon(1e-9));
  }
  SECTION("two stages of one type disagree: their ratios weighted by units (3 and 2)") {
    auto skewed = measured;  // stage 1 (two layers) measured twice as slow forward
    for (auto& e : skewed)
      if (e.track == "p0 s1 compute" && e.name[0] == 'F') e.duration_s *= 2;
    auto c = fidelity::calibrate(plan, truth, skewed, {});
    REQUIRE(c);
    CHECK(c->devices[0].forward.value == Approx((3 * 1.0 + 2 * 2.0) / 5).epsilon(1e-6));
    CHECK(c->devices[0].backward.value == Approx(1).epsilon(1e-9));
  }
  SECTION("a device type without a profile: its factors, no profile, a note") {
    auto c = fidelity::calibrate(plan, {times(truth[0], 2)}, measured, {});
    REQUIRE(c);
    CHECK(c->devices[0].profile);
    CHECK(c->devices[0].forward.value == Approx(0.5).epsilon(1e-9));
    CHECK_FALSE(c->devices[1].profile);
    CHECK(c->devices[1].forward.stages == 1);
    REQUIRE(c->devices[1].notes.size() == 1);
    CHECK_THAT(c->devices[1].notes[0], Catch::Contains("no profile") && Catch::Contains("analytic"));
  }
  SECTION("a trace of a plan with other stages is refused") {
    auto c = fidelity::calibrate(load("tiny-cpu-pipeline.plan.json"), truth, measured, {});
    REQUIRE_FALSE(c);
    CHECK_THAT(test::text(c.errors()), Catch::Contains("\"p0 s2 compute\"") && Catch::Contains("is it a run of this plan?"));
  }
  SECTION("the header says where from and by how much") {
    auto c = fidelity::calibrate(plan, {times(truth[0], 2), truth[1]}, measured, {});
    REQUIRE(c);
    const std::string h = fidelity::calibration_header(c->devices[0], "run.json", "p.json", "wrong.yaml", 4, 1);
    CHECK_THAT(h, Catch::Contains("run.json") && Catch::Contains("p.json") && Catch::Contains("wrong.yaml") &&
                      Catch::Contains("time dilation 4") && Catch::Contains("forward rows x0.5 "));
  }
}

TEST_CASE("compare sets the run's own compute beside the profile's, and a Chrome trace keeps it") {
  const Plan plan = load("tiny-cpu-pipeline.plan.json");
  const std::vector<ProfileSpec> truth = {profile(plan, "cpu-fast", 1), profile(plan, "cpu-slow", 4)};
  const predict::Outcome o = predict_run(plan, truth, 1);
  // The machine computed 1.25x slower than profiled: every forward and backward's own compute
  // 1.25x its predicted duration (tp 1: no collectives inside them).
  auto measured = as_measured(o, 3);
  for (auto& e : measured)
    if (e.name[0] == 'F' || e.name[0] == 'B') e.compute_s = 1.25 * e.duration_s;
  // Through the file hetexec writes and read back.
  het::test::TempDir dir;
  const std::string file = dir.path() + "/t.json";
  std::ofstream(file) << sim::chrome_trace(measured);
  auto read = fidelity::read_chrome_trace(file);
  REQUIRE(read);
  REQUIRE(read->size() == measured.size());
  for (std::size_t i = 0; i < measured.size(); ++i) CHECK((*read)[i].compute_s == Approx(measured[i].compute_s).margin(1e-12));
  auto c = fidelity::compare(o, *read);
  REQUIRE(c);
  CHECK(c->ratio() == Approx(1).epsilon(1e-6));
  CHECK(c->compute_ratio() == Approx(1.25).epsilon(1e-6));
  for (const auto& row : c->stages) CHECK(row.measured.own_compute_s == Approx(1.25 * row.predicted.own_compute_s).epsilon(1e-6));
  CHECK_THAT(fidelity::table(*c), Catch::Contains("own compute: measured ÷ profiled 1.250"));
  // A second member of stage 0 computing more (a CP stage's last context member): its times are
  // the stage's.
  auto members = *read;
  for (const auto& e : *read)
    if (e.track == "p0 s0 compute") {
      auto m = e;
      m.track = "p0 s0 d0 c1 t0 compute";
      if (m.compute_s >= 0) m.compute_s *= 1.5;
      members.push_back(m);
    }
  auto cp = fidelity::compare(o, members);
  REQUIRE(cp);
  CHECK(cp->stages[0].measured.own_compute_s == Approx(1.5 * c->stages[0].measured.own_compute_s).epsilon(1e-6));
  CHECK(cp->stages[1].measured.own_compute_s == Approx(c->stages[1].measured.own_compute_s).epsilon(1e-6));
  // A trace without compute (a predicted one, an older run): no ratio.
  auto plain = fidelity::compare(o, as_measured(o, 3));
  REQUIRE(plain);
  CHECK(plain->compute_ratio() == 0);
}
