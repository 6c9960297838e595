#include <catch2/catch.hpp>

#include "cost/comm.hpp"
#include "cost/compute.hpp"
#include "cost/flops.hpp"
#include "cost/memory.hpp"
#include "input/input.hpp"
#include "predict/stage_cost.hpp"
#include "spec/profile.hpp"
#include "test_util.hpp"

using namespace het;
using namespace het::cost;

namespace {
ModelSpec gpt(int layers, int h, int a, int s, int v) {
  ModelSpec m;
  m.name = "g";
  m.architecture = Architecture::gpt;
  m.num_layers = layers;
  m.hidden_size = h;
  m.num_attention_heads = m.num_kv_heads = a;
  m.ffn_hidden_size = 4 * h;
  m.seq_length = s;
  m.vocab_size = v;
  m.training.global_batch_size = 8;
  m.training.zero_stage = 0;
  return m;
}
DeviceSpec a100() { return {"A100-40GB", 40.0 * (1 << 30), 312e12, 1555e9, 0.5}; }
}  // namespace

TEST_CASE("layer FLOPs follow DESIGN §6 and 24bsh² + 4bs²h for gpt") {
  auto m = gpt(2, 1024, 16, 2048, 50000);
  const double b = 2, s = 2048, h = 1024;
  CHECK(layer_forward_flops(m, b, s) == Approx(24 * b * s * h * h + 4 * b * s * s * h));
  CHECK(head_forward_flops(m, b, s) == Approx(2 * b * s * h * 50000));
  // Iteration FLOPs ~ 6 · parameters · tokens plus attention (within a few % for this shape).
  auto big = gpt(48, 5120, 40, 1024, 51200);
  big.training.global_batch_size = 1024;
  const double six_pt = 6.0 * double(parameter_count(big)) * 1024 * 1024;
  CHECK(iteration_model_flops(big) == Approx(six_pt).epsilon(0.1));
}

TEST_CASE("bf16 activation memory is the CUDA backend's layer: sbh(32 + 4a/h) + 16sb with flash attention, no lse selective, 2sbh full, "
          "with tp the norms' inputs, outputs and statistics whole (no sequence parallelism), with cp the keys and values seen") {
  auto m = gpt(1, 1024, 16, 2048, 50000);
  REQUIRE(m.ffn_hidden_size == 4 * m.hidden_size);
  const double s = 2048, b = 2, h = 1024, a = 16;
  const double none = s * b * h * (32 + 4 * a / h) + 16 * s * b, selective = 32 * s * b * h + 16 * s * b;
  CHECK(layer_activation_bytes(m, b, 1, 1, Recompute::none) == Approx(none));
  CHECK(layer_activation_bytes(m, b, 1, 1, Recompute::selective) == Approx(selective));
  CHECK(layer_activation_bytes(m, b, 1, 1, Recompute::full) == Approx(2 * s * b * h));
  // TP 4: x, ln1, x2, ln2 (8sbh) and the norms' statistics (16sb) on every shard; q, att_out, k, v
  // (8sbh), fc, h (16sbh) and the log-sum-exp (4as) split.
  const double N = s * b;
  CHECK(layer_activation_bytes(m, b, 4, 1, Recompute::none) == Approx(8 * N * h + 16 * N + (24 * N * h + 4 * a * N) / 4));
  CHECK(layer_activation_bytes(m, b, 4, 1, Recompute::full) == Approx(2 * N * h));
  // TP 2 x CP 2: each member's N/2 tokens, and the last member's keys and values seen, all s·b of them.
  CHECK(layer_activation_bytes(m, b, 2, 2, Recompute::selective) ==
        Approx((8 * N * h + 16 * N + 24 * N * h / 2) / 2 + 2 * 2 * N * h / 2));
  // Llama: SwiGLU keeps three N·f tensors, grouped-query attention smaller k and v.
  ModelSpec l = m;
  l.architecture = Architecture::llama, l.num_kv_heads = 4, l.ffn_hidden_size = 2816;
  const double f = 2816;
  CHECK(layer_activation_bytes(l, b, 1, 1, Recompute::none) ==
        Approx(2 * (6 * N * h + 2 * N * h * 4 / a) + 6 * N * f + 16 * N + 4 * a * N));
}

TEST_CASE("model state is 18 bytes per parameter (fp32 gradients), sharded by ZeRO stage over dp as the CUDA backend shards it") {
  auto m = gpt(1, 1024, 16, 2048, 50000);
  StageShape st;
  st.parameters = 1e9;
  st.zero_dp = 8;
  st.in_flight = 0;
  for (int z = 0; z <= 3; ++z) {
    m.training.zero_stage = z;
    auto mem = stage_memory(m, st);
    // weights, gradients, the fp32 masters (whole on every rank: the backend's sync buckets) and
    // AdamW's moments
    const double expect = (z >= 3 ? 2.0 / 8 : 2.0) + (z >= 2 ? 4.0 / 8 : 4.0) + 4.0 + (z >= 1 ? 8.0 / 8 : 8.0);
    CHECK(mem.total() == Approx(1e9 * expect));
  }
  st.tp = 4;
  m.training.zero_stage = 0;
  CHECK(stage_memory(m, st).total() == Approx(18e9 / 4));
}

TEST_CASE("ring collectives follow the alpha-beta formulas") {
  LinkSpec l{100e9, 5e-6};
  CHECK(allreduce_s(1e9, 8, l) == Approx(2.0 * 7 / 8 * 1e9 / 100e9 + 2 * 7 * 5e-6));
  CHECK(allgather_s(1e9, 4, l) == Approx(3.0 / 4 * 1e9 / 100e9 + 3 * 5e-6));
  CHECK(allreduce_s(1e9, 1, l) == 0);
  CHECK(p2p_s(1e6, l) == Approx(5e-6 + 1e-5));
  CHECK(shared(l, 4).bandwidth == Approx(25e9));
}

TEST_CASE("analytic compute: FLOPs / (tp·cp) / (peak × efficiency), backward twice, the head and the embedding / cp only") {
  auto m = gpt(4, 1024, 16, 2048, 50000);
  ComputeModel cm(m, {});
  auto u = cm.unit(UnitKind::layer, a100(), 2, 1, 2);
  CHECK(u.source == Source::analytic);
  CHECK_FALSE(u.includes_tp_comm);
  CHECK(u.forward_s == Approx(layer_forward_flops(m, 2, 2048) / 2 / (312e12 * 0.5)));
  CHECK(u.backward_s == Approx(2 * u.forward_s));
  CHECK(u.recompute_selective_s == Approx(attention_core_flops(m, 2, 2048) / 2 / (312e12 * 0.5)));
  // The head is whole on every TP shard (no vocabulary-parallel head in the backends): only cp splits it.
  auto head = cm.unit(UnitKind::head, a100(), 4, 2, 2);
  CHECK(head.forward_s == Approx(head_forward_flops(m, 2, 2048) / 2 / (312e12 * 0.5)));
  CHECK(head.forward_s == Approx(cm.unit(UnitKind::head, a100(), 1, 2, 2).forward_s));
  CHECK(cm.unit(UnitKind::embedding, a100(), 4, 1, 2).forward_s == Approx(cm.unit(UnitKind::embedding, a100(), 1, 1, 2).forward_s));
}

TEST_CASE("profiled compute: exact rows, interpolation, extrapolation, scaled shapes") {
  auto m = gpt(4, 1024, 16, 2048, 50000);
  ProfileSpec p;
  p.device = "A100-40GB";
  p.model = {Architecture::gpt, 1024, 16, 2048, {}, {}, {}};
  p.units = {{UnitKind::layer, 1, 1, 1, 2048, 0.002, 0.004, {}, {}, {}, 0},
             {UnitKind::layer, 1, 1, 4, 2048, 0.005, 0.010, {}, {}, {}, 0}};
  ComputeModel cm(m, {p});
  auto exact = cm.unit(UnitKind::layer, a100(), 1, 1, 4);
  CHECK(exact.source == Source::profile);
  CHECK(exact.forward_s == Approx(0.005));
  CHECK(exact.includes_tp_comm);
  auto mid = cm.unit(UnitKind::layer, a100(), 1, 1, 2);
  CHECK(mid.source == Source::interpolated);
  CHECK(mid.forward_s == Approx(0.003));  // linear between 1 -> 2 ms and 4 -> 5 ms
  CHECK(mid.backward_s == Approx(0.006));
  auto beyond = cm.unit(UnitKind::layer, a100(), 1, 1, 8);
  CHECK(beyond.source == Source::extrapolated);
  CHECK(beyond.forward_s == Approx(0.009));
  auto tp2 = cm.unit(UnitKind::layer, a100(), 2, 1, 4);  // not measured: scaled by the analytic ratio (1/2)
  CHECK(tp2.source == Source::extrapolated);
  CHECK(tp2.forward_s == Approx(0.0025));
  auto other = cm.unit(UnitKind::layer, {"V100-16GB", 16e9, 125e12, 900e9, 0}, 1, 1, 4);
  CHECK(other.source == Source::analytic);  // no profile for this device
  auto attn = cm.unit(UnitKind::attn, a100(), 1, 1, 4);  // sublayer from whole-layer rows
  CHECK(attn.forward_s == Approx(0.005 * attn_forward_flops(m, 4, 2048) / layer_forward_flops(m, 4, 2048)));
}

TEST_CASE("a profile of one shard's compute (collectives: excluded) gets the TP and CP collectives from the links") {
  auto m = gpt(4, 1024, 16, 2048, 50000);
  ProfileSpec p;
  p.device = "A100-40GB";
  p.model = {Architecture::gpt, 1024, 16, 2048, {}, {}, {}};
  p.units = {{UnitKind::layer, 2, 1, 4, 2048, 0.005, 0.010, {}, {}, {}, 0}};
  ComputeModel included(m, {p});
  p.collectives_included = false;
  ComputeModel excluded(m, {p});
  CHECK(included.unit(UnitKind::layer, a100(), 2, 1, 4).includes_tp_comm);
  CHECK(included.unit(UnitKind::layer, a100(), 2, 1, 4).includes_cp_comm);
  CHECK_FALSE(included.unit(UnitKind::layer, a100(), 2, 2, 4).includes_cp_comm);  // cp 2 scaled from cp 1 rows
  CHECK_FALSE(excluded.unit(UnitKind::layer, a100(), 2, 1, 4).includes_tp_comm);
  // The stage adds the TP all-reduces to the measured shard's compute (and nothing to the
  // included profile's).
  predict::Placement pl;
  SubclusterSpec sub;
  sub.device = a100();
  sub.intra_node = {100e9, 10e-6};
  pl.sub = &sub, pl.nodes = 1, pl.per_node = 2;
  const double tp_s = 2 * cost::allreduce_s(4.0 * 2048 * 1024 * 2, 2, sub.intra_node);
  CHECK(predict::unit_times(m, included, UnitKind::layer, pl, 2, 1, Recompute::none, 4).forward_s == Approx(0.005));
  CHECK(predict::unit_times(m, excluded, UnitKind::layer, pl, 2, 1, Recompute::none, 4).forward_s == Approx(0.005 + tp_s));
  // Written and read back.
  auto doc = input::parse(write_profile(p, "test"), "p.yaml");
  REQUIRE(doc.ok());
  auto back = read_profile(*doc);
  REQUIRE(back.ok());
  CHECK_FALSE(back->collectives_included);
}

TEST_CASE("a profile of another model shape is not used, and the reason is kept") {
  auto m = gpt(4, 2048, 16, 2048, 50000);
  ProfileSpec p;
  p.device = "A100-40GB";
  p.model = {Architecture::gpt, 1024, 16, 2048, {}, {}, {}};
  p.units = {{UnitKind::layer, 1, 1, 1, 2048, 0.002, 0.004, {}, {}, {}, 0}};
  ComputeModel cm(m, {p});
  CHECK_FALSE(cm.has_profile("A100-40GB"));
  REQUIRE(cm.notes().size() == 1);
  CHECK_THAT(cm.notes()[0], Catch::Contains("the profile was measured for hidden_size 1024, but the model has 2048"));
  CHECK(cm.unit(UnitKind::layer, a100(), 1, 1, 1).source == Source::analytic);
}

TEST_CASE("the profiled optimizer step per tp: a single time for all, the median of a tp's rows, the nearest tp scaled") {
  auto m = gpt(4, 1024, 16, 2048, 50000);
  ProfileSpec p;
  p.device = "A100-40GB";
  p.model = {Architecture::gpt, 1024, 16, 2048};
  p.units = {{UnitKind::layer, 1, 1, 1, 2048, 0.002, 0.004, {}, {}, {}, 0}};
  p.optimizer_step = {{std::nullopt, std::nullopt, 1.5e-3}};
  CHECK(ComputeModel(m, {p}).optimizer_step("A100-40GB", 4).value() == Approx(1.5e-3));  // the old single time
  p.optimizer_step = {{1, 1, 3.0e-3}, {1, 2, 2.9e-3}, {1, 4, 3.2e-3}, {2, 1, 1.6e-3}, {2, 2, 1.4e-3}};
  p.assumptions = {"backward = 2 x forward: a test"};
  ComputeModel cm(m, {p});
  CHECK(cm.optimizer_step("A100-40GB", 1).value() == Approx(3.0e-3));  // median of three
  CHECK(cm.optimizer_step("A100-40GB", 2).value() == Approx(1.5e-3));  // median of two
  CHECK(cm.optimizer_step("A100-40GB", 8).value() == Approx(1.5e-3 * 2 / 8));  // nearest: tp 2
  CHECK_FALSE(cm.optimizer_step("V100-16GB", 1).has_value());
  REQUIRE(cm.notes().size() == 1);
  CHECK(cm.notes()[0] == "profile for A100-40GB assumes: backward = 2 x forward: a test");
}

// A gradient-sync ring over two subclusters (predict::sync_link): its chunks are pipelined
// around the ring, so latencies add along a chunk's 2(p-1) hops, each hop's as often as any
// other's: the slow link's latency twice per lap (once each way), not at every step; its
// bandwidth is the slowest hop's, shared by the rings leaving a node at once (one per TP shard).
TEST_CASE("a sync ring over two subclusters pays their link's latency twice per lap, at its slowest bandwidth") {
  ClusterSpec cluster;
  for (const char* name : {"a", "b"}) {
    SubclusterSpec sub;
    sub.name = name, sub.nodes = 1, sub.devices_per_node = 8;
    sub.intra_node = {300e9, 2e-6};
    cluster.subclusters.push_back(sub);
  }
  cluster.links.push_back({"a", "b", {1e9, 1e-3}});
  auto stage = [](const char* sub, int dp, int tp) {
    Stage s;
    s.subcluster = sub, s.dp = dp, s.tp = tp;
    for (int k = 0; k < dp * tp; ++k) s.devices.push_back({0, k});
    return s;
  };
  const Stage a = stage("a", 4, 1), b = stage("b", 4, 1);
  // One ring of 8: 6 hops inside the nodes, 2 over the link.
  const LinkSpec one = predict::sync_link(cluster, {&a, &b}, predict::Rings::one);
  CHECK(one.bandwidth == Approx(1e9));
  CHECK(one.latency == Approx((2 * 1e-3 + 6 * 2e-6) / 8));
  CHECK(allreduce_s(8e6, 8, one) == Approx(2.0 * 7 / 8 * 8e6 / 1e9 + 14 * (2 * 1e-3 + 6 * 2e-6) / 8));
  // TP 2: two rings (one per shard) of 4, side by side, share each node's way out.
  const Stage a2 = stage("a", 2, 2), b2 = stage("b", 2, 2);
  const LinkSpec shard = predict::sync_link(cluster, {&a2, &b2}, predict::Rings::per_shard);
  CHECK(shard.bandwidth == Approx(0.5e9));
  CHECK(shard.latency == Approx((2 * 1e-3 + 2 * 2e-6) / 4));
  // What every shard holds whole: one ring over all 8 ranks, the link to itself.
  CHECK(predict::sync_link(cluster, {&a2, &b2}, predict::Rings::one).bandwidth == Approx(1e9));
  // Inside one node: the intra-node link.
  const LinkSpec inside = predict::sync_link(cluster, {&a}, predict::Rings::one);
  CHECK(inside.latency == Approx(2e-6));
  CHECK(inside.bandwidth == Approx(300e9));
}
