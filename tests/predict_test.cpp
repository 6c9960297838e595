#include <catch2/catch.hpp>

#include <algorithm>

#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "predict/predict.hpp"
#include "predict/stage_cost.hpp"
#include "kept_plans.hpp"
#include "test_util.hpp"
#include "validation/inputs.hpp"

using namespace het;

namespace {

// S stages of one layer each on one fast subcluster with nearly free links: the predicted
// iteration must be 1F1B's closed form (m+S-1)(f+b) plus the (tiny) optimizer step.
Plan homogeneous(int S, int m, ScheduleKind kind) {
  const int layers = S;  // stage 0 also holds the embedding, the last one the head
  auto md = test::doc("name: h\narchitecture: gpt\nnum_layers: " + std::to_string(layers) +
                          "\nhidden_size: 1024\nnum_attention_heads: 16\nvocab_size: 1024\nseq_length: 512\n"
                          "training: {global_batch_size: " + std::to_string(m) + ", zero_stage: 0}\n",
                      "m.yaml");
  auto cd = test::doc(
      "name: c\nsubclusters:\n  - {name: a, device: A100-80GB, nodes: 1, devices_per_node: " + std::to_string(S) +
          ", intra_node: {bandwidth: 1000TB/s, latency: 0s}}\n",
      "c.yaml");
  Plan plan;
  plan.model = *read_model(md.file, md.root, "");
  plan.cluster = *read_cluster(cd.file, cd.root, "", test::catalog());
  plan.schedule = kind;
  Pipeline p;
  p.micro_batch_size = 1;
  p.num_microbatches = m;
  for (int s = 0; s < S; ++s) {
    Stage st;
    st.subcluster = "a";
    st.first = s == 0 ? 0 : s + 1;
    st.last = s == S - 1 ? layers + 1 : s + 1;
    st.devices = {{0, s}};
    p.stages.push_back(st);
  }
  plan.pipelines = {p};
  return plan;
}

// A plan of a 4-layer gpt (global batch 32) on the given cluster, without pipelines yet.
Plan four_layers_on(const input::Document& cluster) {
  auto md = test::doc("name: h\narchitecture: gpt\nnum_layers: 4\nhidden_size: 1024\nnum_attention_heads: 16\n"
                      "vocab_size: 1024\nseq_length: 512\ntraining: {global_batch_size: 32}\n",
                      "m.yaml");
  Plan plan;
  plan.model = *read_model(md.file, md.root, "");
  plan.cluster = *read_cluster(cluster.file, cluster.root, "", test::catalog());
  return plan;
}

}  // namespace

TEST_CASE("predict fills every derived field, and the result validates and round-trips") {
  Plan plan = homogeneous(4, 16, ScheduleKind::one_f_one_b);
  REQUIRE(validate_plan(plan, "p").empty());
  cost::ComputeModel cm(plan.model, {});
  auto out = predict::predict(plan, cm, {});
  REQUIRE(out.ok());
  const Plan& done = out->plan;
  REQUIRE(done.predicted.has_value());
  CHECK(done.predicted->iteration_s > 0);
  CHECK(done.predicted->tokens_per_s == Approx(16.0 * 512 / done.predicted->iteration_s));
  CHECK(done.predicted->mfu > 0);
  CHECK(done.predicted->mfu < 0.5);  // efficiency 0.5 bounds the analytic model
  CHECK(done.predicted->per_stage.size() == 4);
  // Without the detail per stage (the search's own rankings): the same prediction, no JSON.
  predict::Options lean;
  lean.per_stage = false;
  auto quiet = predict::predict(plan, cm, lean);
  REQUIRE(quiet.ok());
  CHECK(quiet->plan.predicted->per_stage.empty());
  CHECK(quiet->plan.predicted->iteration_s == done.predicted->iteration_s);
  CHECK(quiet->plan.predicted->mfu == done.predicted->mfu);
  for (int s = 0; s < 4; ++s) {
    CHECK(done.pipelines[0].stages[s].warmup == 4 - s);
    CHECK(done.pipelines[0].stages[s].predicted->memory_bytes > 0);
  }
  CHECK(validate_plan(done, "p").empty());
  test::keep_plan(write_plan(done));
  auto back = read_plan(test::doc(write_plan(done), "p.json"), {nullptr, nullptr, &test::catalog()});
  REQUIRE(back.ok());
  CHECK(write_plan(*back) == write_plan(done));
}

TEST_CASE("predicted time of equal stages on free links is 1F1B's closed form") {
  // Middle stages hold one layer; the first and last also the embedding and head, so take
  // the slowest stage's f+b as the bound and check the middle-stage closed form holds for gpipe = 1f1b.
  Plan plan = homogeneous(4, 32, ScheduleKind::one_f_one_b);
  cost::ComputeModel cm(plan.model, {});
  auto one = predict::predict(plan, cm, {});
  REQUIRE(one.ok());
  double t_max = 0;
  for (const auto& d : one->stages[0]) t_max = std::max(t_max, d.forward_s + d.backward_s);
  const double makespan = one->sim.pipelines[0].makespan_s;
  CHECK(makespan <= (32 + 4 - 1) * t_max * 1.001);
  CHECK(makespan >= 32 * t_max);
  predict::Options g;
  g.schedule = ScheduleKind::gpipe;
  auto gp = predict::predict(plan, cm, g);
  REQUIRE(gp.ok());
  CHECK(gp->sim.pipelines[0].makespan_s == Approx(makespan).epsilon(0.001));
  CHECK(gp->plan.pipelines[0].stages[0].warmup == 32);
  // gpipe holds all 32 micro-batches: more activation memory on every stage.
  CHECK(gp->stages[0][1].memory.activations == Approx(32.0 / 3 * one->stages[0][1].memory.activations));
}

TEST_CASE("a cross-subcluster hop gets one more warm-up under virtual-1f1b, and pays D2H + H2D") {
  auto cd = test::doc(R"(name: c
subclusters:
  - {name: a, device: A100-80GB, nodes: 1, devices_per_node: 2}
  - {name: b, device: H800-80GB, nodes: 1, devices_per_node: 2}
links:
  - {between: [a, b], bandwidth: 10Gbit/s, latency: 1ms}
)",
                      "c.yaml");
  Plan plan = four_layers_on(cd);
  plan.schedule = ScheduleKind::virtual_1f1b;
  Pipeline p;
  p.micro_batch_size = 1;
  p.num_microbatches = 32;
  Stage s0, s1, s2;
  s0.subcluster = "a", s0.first = 0, s0.last = 1, s0.devices = {{0, 0}};
  s1.subcluster = "a", s1.first = 2, s1.last = 3, s1.devices = {{0, 1}};
  s2.subcluster = "b", s2.first = 4, s2.last = 5, s2.devices = {{0, 0}};
  p.stages = {s0, s1, s2};
  plan.pipelines = {p};
  REQUIRE(validate_plan(plan, "p").empty());
  cost::ComputeModel cm(plan.model, {});
  auto v = predict::predict(plan, cm, {});
  REQUIRE(v.ok());
  CHECK(v->stages[0][0].warmup == 4);  // 1f1b's 3, plus the boundary after stage 1
  CHECK(v->stages[0][1].warmup == 3);
  CHECK(v->stages[0][2].warmup == 1);
  CHECK(v->stages[0][1].crosses_subcluster);
  const double bytes = 512.0 * 1024 * 2;
  CHECK(v->stages[0][1].send_forward_s == Approx(1e-3 + bytes / 1.25e9 + 2 * bytes / 24e9));
  CHECK(v->plan.predicted->cross_cluster_bytes == Approx(2 * 32 * bytes));
  predict::Options o;
  o.schedule = ScheduleKind::one_f_one_b;
  auto plain = predict::predict(plan, cm, o);
  REQUIRE(plain.ok());
  CHECK(plain->stages[0][0].warmup == 3);
  CHECK(plain->plan.predicted->iteration_s >= v->plan.predicted->iteration_s);
}

TEST_CASE("predict caps a stage's warm-ups by all it holds per micro-batch in flight: the head's logits too") {
  // gpipe runs every forward first; the head stage holds each micro-batch's logits [b, T, V]
  // beside its activations (cost::stage_memory's stage_buffers). A cap on warm-ups that counts
  // the activations alone (predict before 2026-12-05) let this stage run 29 warm-ups where its
  // memory holds 10.
  auto md = test::doc("name: h\narchitecture: gpt\nnum_layers: 2\nhidden_size: 1024\nnum_attention_heads: 16\n"
                      "vocab_size: 65536\nseq_length: 512\ntraining: {global_batch_size: 32, zero_stage: 0}\n",
                      "m.yaml");
  auto cd = test::doc("name: c\nsubclusters:\n  - {name: a, device: A100-80GB, nodes: 1, devices_per_node: 2}\n", "c.yaml");
  Plan plan;
  plan.model = *read_model(md.file, md.root, "");
  plan.cluster = *read_cluster(cd.file, cd.root, "", test::catalog());
  plan.schedule = ScheduleKind::gpipe;
  Pipeline p;
  p.micro_batch_size = 1;
  p.num_microbatches = 32;
  Stage s0, s1;
  s0.subcluster = s1.subcluster = "a";
  s0.first = 0, s0.last = 1, s0.devices = {{0, 0}};
  s1.first = 2, s1.last = 3, s1.devices = {{0, 1}};
  p.stages = {s0, s1};
  plan.pipelines = {p};
  cost::ComputeModel cm(plan.model, {});
  auto roomy = predict::predict(plan, cm, {});
  REQUIRE(roomy.ok());
  const predict::StageDetail& head = roomy->stages[0][1];
  REQUIRE(head.warmup == 32);
  REQUIRE(head.memory.stage_buffers > 0);
  const double per = (head.memory.activations + head.memory.stage_buffers) / 32;
  const double fixed = head.memory.total() - head.memory.read_ahead - 32 * per;
  // A device whose limit holds the head stage with 10.5 micro-batches in flight.
  DeviceSpec& dev = plan.cluster.subclusters[0].device;
  dev.memory = (fixed + 10.5 * per) / (1 - predict::Options{}.memory_headroom) + dev.reserve;
  auto tight = predict::predict(plan, cm, {});
  REQUIRE(tight.ok());
  const predict::StageDetail& capped = tight->stages[0][1];
  CHECK(capped.warmup == 10);
  for (const auto& d : tight->stages[0]) CHECK(d.memory.total() - d.memory.read_ahead <= d.limit);
}

TEST_CASE("on the CPU backend a stage's peak memory holds the activations the stage before sent ahead of its warm-up") {
  // The transport reads frames as they arrive (transport/tcp.hpp): when a stage ends its warm-up
  // of w forwards, the stage before, with a warm-up of w_before, has sent w_before − w more.
  auto cd = test::doc(R"(name: c
subclusters:
  - {name: a, device: A100-80GB, nodes: 1, devices_per_node: 4}
)",
                      "c.yaml");
  Plan plan = four_layers_on(cd);
  Pipeline p;
  p.micro_batch_size = 2;
  p.num_microbatches = 16;
  Stage s0, s1, s2;
  s0.subcluster = "a", s0.first = 0, s0.last = 1, s0.devices = {{0, 0}};
  s1.subcluster = "a", s1.first = 2, s1.last = 3, s1.devices = {{0, 1}};
  s2.subcluster = "a", s2.first = 4, s2.last = 5, s2.devices = {{0, 2}, {0, 3}}, s2.tp = 2;
  s1.resharding = Resharding::all_pairs;
  p.stages = {s0, s1, s2};
  plan.pipelines = {p};
  cost::ComputeModel cm(plan.model, {});
  auto bf16 = predict::predict(plan, cm, {});  // device memory: the frames are in host memory
  REQUIRE(bf16.ok());
  for (const auto& d : bf16->stages[0]) CHECK(d.memory.read_ahead == 0);

  // Untied (llama), so that no gradient sync spans the stages; the TP shards of the last stage
  // sum the gradients of what each holds whole (norms, the head), and the first chunk of that
  // ring reaches a shard during its last backward too.
  plan.model.dtype = DType::fp32;
  plan.model.architecture = Architecture::llama;
  const double frame = 2.0 * 512 * 1024 * 4;  // [b, T, C] fp32
  auto v = predict::predict(plan, cm, {});
  REQUIRE(v.ok());
  double chunk = -1;
  for (const auto& b : predict::sync_buckets(v->plan))
    if (chunk < 0 && b.ring > 1 && std::count(b.members.begin(), b.members.end(), std::pair{0, 2})) chunk = b.elements / b.ring * 4;
  REQUIRE(chunk > 0);
  const auto& st = v->stages[0];
  REQUIRE(st[0].warmup == 3);
  REQUIRE(st[1].warmup == 2);
  REQUIRE(st[2].warmup == 1);
  CHECK(st[0].memory.read_ahead == 0);  // the first stage reads tokens, not frames
  CHECK(st[1].memory.read_ahead == Approx(1 * frame));
  CHECK(st[2].memory.read_ahead == Approx(1 * frame + chunk));  // all-pairs: each TP shard gets the whole tensor
  CHECK(st[2].memory.total() > st[2].memory.read_ahead);

  // Gathered, sent once and scattered: the first shard takes the whole tensor off the link.
  plan.pipelines[0].stages[1].resharding = Resharding::gather_send_scatter;
  auto g = predict::predict(plan, cm, {});
  REQUIRE(g.ok());
  CHECK(g->stages[0][2].memory.read_ahead == Approx(frame + chunk));

  // Sent and all-gathered: each shard takes half of it from the link.
  plan.pipelines[0].stages[1].resharding = Resharding::send_recv_allgather;
  auto a = predict::predict(plan, cm, {});
  REQUIRE(a.ok());
  CHECK(a->stages[0][2].memory.read_ahead == Approx(frame / 2 + chunk));

  // gpt ties the head to the token embedding: the first and last stages sum its gradient, and
  // the first chunk of that ring (|wte| / 3 ranks) reaches a stage during its last backward.
  plan.model.architecture = Architecture::gpt;
  auto tied = predict::predict(plan, cm, {});
  REQUIRE(tied.ok());
  CHECK(tied->stages[0][0].memory.read_ahead == Approx(1024.0 * 1024 / 3 * 4));
}

TEST_CASE("resharding between stages of different (dp, tp) picks the cheapest strategy unless told") {
  auto cd = test::doc(R"(name: c
subclusters:
  - {name: a, device: A100-80GB, nodes: 2, devices_per_node: 4, inter_node: {bandwidth: 100Gbit/s, latency: 5us}}
  - {name: b, device: H800-80GB, nodes: 1, devices_per_node: 4}
links:
  - {between: [a, b], bandwidth: 10Gbit/s, latency: 1ms}
)",
                      "c.yaml");
  Plan plan = four_layers_on(cd);
  Pipeline p;
  p.micro_batch_size = 4;
  p.num_microbatches = 8;
  Stage s0, s1;
  s0.subcluster = "a", s0.first = 0, s0.last = 2, s0.dp = 4, s0.tp = 2;
  for (int n = 0; n < 2; ++n)
    for (int d = 0; d < 4; ++d) s0.devices.push_back({n, d});
  s1.subcluster = "b", s1.first = 3, s1.last = 5, s1.dp = 1, s1.tp = 4;
  for (int d = 0; d < 4; ++d) s1.devices.push_back({0, d});
  p.stages = {s0, s1};
  plan.pipelines = {p};
  REQUIRE(validate_plan(plan, "p").empty());
  cost::ComputeModel cm(plan.model, {});
  double best = 1e9;
  for (Resharding r : kReshardings) {
    predict::Options o;
    o.resharding = r;
    auto out = predict::predict(plan, cm, o);
    REQUIRE(out.ok());
    CHECK(out->plan.pipelines[0].stages[0].resharding == r);  // written into the plan
    const auto& d = out->stages[0][0];
    best = std::min(best, d.send_forward_s + d.send_backward_s);
    // Every strategy but all-pairs moves the activation across the slow link once.
    if (r != Resharding::all_pairs) CHECK(d.send_bytes == Approx(4 * 512.0 * 1024 * 2));
  }
  auto cheapest = predict::predict(plan, cm, {});
  REQUIRE(cheapest.ok());
  const auto& c = cheapest->stages[0][0];
  CHECK(c.send_forward_s + c.send_backward_s == Approx(best));
  // All-pairs sends the activation once per receiving TP rank across the slow link.
  predict::Options ap;
  ap.resharding = Resharding::all_pairs;
  auto all = predict::predict(plan, cm, ap);
  CHECK(all->stages[0][0].send_bytes == Approx(4 * 4 * 512.0 * 1024 * 2));
  // Forward, all-pairs sends tp_b = 4 copies; backward, tp_a = 2: forward is the slower.
  CHECK(all->stages[0][0].send_forward_s > all->stages[0][0].send_backward_s);
  // A plan that names its strategy is costed (and run) with it.
  Plan named = plan;
  named.pipelines[0].stages[0].resharding = Resharding::gather_send_scatter;
  auto kept = predict::predict(named, cm, {});
  REQUIRE(kept.ok());
  CHECK(kept->plan.pipelines[0].stages[0].resharding == Resharding::gather_send_scatter);
}

TEST_CASE("HAPT's case study (§2.2.2, Table 1): the 128-unit plan is ~40% faster than the 8-unit plan") {
  InputFiles files;
  files.model = HET_SOURCE_DIR "/configs/models/hapt-case-study-gpt-128l.yaml";
  files.cluster = HET_SOURCE_DIR "/configs/clusters/hapt-case-study-2x2a100-1x2v100.yaml";
  auto run = [&](const char* name) {
    files.plan = std::string(HET_SOURCE_DIR "/docs/examples/") + name;
    auto loaded = load_plan_inputs(files);
    INFO((loaded ? "" : test::text(loaded.errors())));
    REQUIRE(loaded.ok());
    cost::ComputeModel cm(loaded->plan.model, {});
    auto out = predict::predict(loaded->plan, cm, {});
    REQUIRE(out.ok());
    return *out;
  };
  auto coarse = run("hapt-case-study-8.plan.json");
  auto fine = run("hapt-case-study-128.plan.json");
  auto cost = [](const predict::Outcome& o, int s) { return o.stages[0][s].forward_s + o.stages[0][s].backward_s; };
  const double t = cost(coarse, 1);  // Table 1's reference: an A100 stage of the 8-unit plan
  CHECK(cost(coarse, 0) / t == Approx(1.65).margin(0.05));  // V100 stage, 25% of the work
  CHECK(cost(fine, 0) / t == Approx(1.13).margin(0.05));
  CHECK(cost(fine, 1) / t == Approx(1.10).margin(0.05));
  const double speedup = coarse.plan.predicted->iteration_s / fine.plan.predicted->iteration_s;
  CHECK(speedup > 1.38);  // paper: 40.1%; Table 1's own costs under eq. 13: 44.5%
  CHECK(speedup < 1.50);
  CHECK(fine.load_balance_eta > coarse.load_balance_eta);
}

TEST_CASE("place_block places a block of consecutive devices as place does from its device list") {
  for (int M : {1, 2, 4, 8}) {
    SubclusterSpec sub;
    sub.name = "s";
    sub.devices_per_node = M;
    sub.nodes = 64;
    ClusterSpec cluster;
    cluster.subclusters = {sub};
    for (int offset = 0; offset < 3 * M + 2; ++offset)
      for (int count = 1; count <= 4 * M + 3; ++count)
        for (int tp = 1; tp <= count; tp *= 2) {
          if (count % tp) continue;
          Stage st;
          st.subcluster = "s";
          st.tp = tp, st.dp = count / tp;
          for (int k = offset; k < offset + count; ++k) st.devices.push_back({k / M, k % M});
          const predict::Placement a = predict::place(st, cluster), b = predict::place_block(cluster.subclusters[0], offset, count, tp);
          INFO("M " << M << " offset " << offset << " count " << count << " tp " << tp);
          CHECK(a.sub == b.sub);
          CHECK(a.nodes == b.nodes);
          CHECK(a.per_node == b.per_node);
          CHECK(a.tp_in_node == b.tp_in_node);
        }
  }
}

TEST_CASE("a TP stage's optimizer step covers what one device holds: its share of the split parameters and every whole one") {
  // One stage holding the whole 1-layer gpt (embedding, layer, head), at tp 1 and tp 2. Each TP
  // shard keeps the embedding, the head and the layer's norms and biases whole (both backends),
  // and steps them: the step at tp 2 is not half the one at tp 1.
  Plan plan = homogeneous(1, 4, ScheduleKind::one_f_one_b);
  cost::ComputeModel cm(plan.model, {});
  auto one = predict::predict(plan, cm, {});
  REQUIRE(one.ok());
  plan.pipelines[0].stages[0].tp = 2;
  plan.pipelines[0].stages[0].devices = {{0, 0}, {0, 1}};
  plan.cluster.subclusters[0].devices_per_node = 2;
  REQUIRE(validate_plan(plan, "test").empty());
  auto two = predict::predict(plan, cm, {});
  REQUIRE(two.ok());
  const auto units = predict::count_units(plan, plan.pipelines[0].stages[0]);
  const double all = predict::stage_parameters(plan.model, units);
  const double whole = predict::whole_parameters(plan.model, UnitKind::layer) + predict::whole_parameters(plan.model, UnitKind::embedding) +
                       predict::whole_parameters(plan.model, UnitKind::head);
  REQUIRE(whole > 0.05 * all);  // what makes the difference visible
  CHECK(two->stages[0][0].optimizer_s / one->stages[0][0].optimizer_s == Approx(((all - whole) / 2 + whole) / all).epsilon(1e-9));
}
