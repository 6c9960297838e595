// Mixed sequence lengths (issue 22 step 4; Hetu v2 §7.3): the model's distribution, the plan's
// micro-batches per bucket, the simulator's micro-batches of different costs, the prediction,
// and the assignment of lengths to pipelines of different shapes.
#include <catch2/catch.hpp>

#include <optional>

#include "plan/buckets.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "predict/predict.hpp"
#include "search/lengths.hpp"
#include "search/search.hpp"
#include "sim/sim.hpp"
#include "spec/cluster.hpp"
#include "test_util.hpp"

using namespace het;

namespace {

const char* kModel = R"(name: tiny-llama
architecture: llama
num_layers: 4
hidden_size: 64
num_attention_heads: 4
num_kv_heads: 2
ffn_hidden_size: 176
vocab_size: 256
seq_length: 32
dtype: fp32
training:
  global_batch_size: 16
  micro_batch_sizes: [2]
  zero_stage: 0
  recompute: [none]
)";

// A Llama of 350M parameters whose micro-batches cost far more than its gradient sync.
const char* kMidModel = R"(name: llama-350m
architecture: llama
num_layers: 24
hidden_size: 1024
num_attention_heads: 16
vocab_size: 32000
seq_length: 4096
training:
  global_batch_size: 16
  micro_batch_sizes: [2]
  recompute: [none]
)";

Result<ModelSpec> model_with(const std::string& lengths, const char* base = kModel) {
  auto d = test::doc(std::string(base) + lengths, "model.yaml");
  return read_model(d.file, d.root, "");
}

ClusterSpec demo_cluster() {
  auto c = load_cluster(HET_SOURCE_DIR "/configs/clusters/demo-1x4a100-1x4v100.yaml", test::catalog());
  REQUIRE(c.ok());
  return *c;
}

// One single-stage pipeline per entry of `subclusters`, each on that subcluster's device
// `device`, micro-batches of 2 sequences, the global batch split evenly.
Plan one_stage_pipelines(const ModelSpec& m, const std::vector<std::pair<std::string, int>>& where) {
  Plan plan;
  plan.model = m;
  plan.cluster = demo_cluster();
  for (const auto& [sub, device] : where) {
    Pipeline p;
    p.micro_batch_size = 2;
    p.num_microbatches = m.training.global_batch_size / 2 / static_cast<int>(where.size());
    Stage s;
    s.subcluster = sub;
    s.first = 0;
    s.last = num_units(m, Granularity::layer) - 1;
    s.devices = {{0, device}};
    p.stages.push_back(s);
    plan.pipelines.push_back(p);
  }
  REQUIRE(spread_buckets(plan));
  return plan;
}

}  // namespace

TEST_CASE("a model's sequence-length distribution is read, written back and checked field by field") {
  auto m = model_with("seq_lengths:\n  - {length: 8, share: 0.75}\n  - {length: 32, share: 0.25}\n");
  REQUIRE(m.ok());
  REQUIRE(m->seq_lengths.size() == 2);
  CHECK(m->seq_lengths[0] == SeqLengthBucket{8, 0.75});
  CHECK(bucket_sequences(*m, 0) == 12);
  CHECK(bucket_sequences(*m, 1) == 4);
  CHECK(tokens_per_iteration(*m) == 12 * 8 + 4 * 32);
  // Written as the reader reads it.
  auto back = read_model("m.json", YAML::Load(to_json(*m).dump()), "");
  REQUIRE(back.ok());
  CHECK(back->seq_lengths == m->seq_lengths);

  auto refused = [](const std::string& lengths, const std::string& path, const std::string& words) {
    auto r = model_with(lengths);
    REQUIRE_FALSE(r.ok());
    INFO(test::text(r.errors()));
    bool found = false;
    for (const auto& d : r.errors()) found = found || (d.path == path && d.message.find(words) != std::string::npos);
    CHECK(found);
  };
  refused("seq_lengths:\n  - {length: 8, share: 0.5}\n  - {length: 32, share: 0.4}\n", "seq_lengths", "sum to 0.9");
  refused("seq_lengths:\n  - {length: 8, share: 0.7}\n  - {length: 32, share: 0.3}\n", "seq_lengths[0].share",
          "11.2 sequences");
  refused("seq_lengths:\n  - {length: 8, share: 0.5}\n  - {length: 64, share: 0.5}\n", "seq_lengths[1].length",
          "longer than seq_length 32");
  refused("seq_lengths:\n  - {length: 32, share: 0.5}\n  - {length: 8, share: 0.5}\n", "seq_lengths[1].length", "ascend");
  refused("seq_lengths:\n  - {length: 8, share: 0}\n  - {length: 32, share: 1}\n", "seq_lengths[0].share", "more than 0");
  refused("seq_lengths:\n  - {length: 8, portion: 1}\n", "seq_lengths[0].portion", "");
}

TEST_CASE("a pipeline runs its micro-batches bucket by bucket, and the buckets are dealt over the pipelines") {
  Pipeline p;
  p.num_microbatches = 8;
  p.bucket_microbatches = {6, 2};
  CHECK(microbatch_buckets(p) == std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1});
  p.bucket_microbatches = {0, 3, 5};
  CHECK(microbatch_buckets(p) == std::vector<int>{1, 1, 1, 2, 2, 2, 2, 2});
  p.bucket_microbatches.clear();
  CHECK(microbatch_buckets(p) == std::vector<int>(8, 0));

  auto m = model_with("seq_lengths:\n  - {length: 8, share: 0.75}\n  - {length: 32, share: 0.25}\n");
  REQUIRE(m.ok());
  Plan plan = one_stage_pipelines(*m, {{"v100", 0}, {"a100", 0}});
  CHECK(plan.pipelines[0].bucket_microbatches == std::vector<int>{3, 1});
  CHECK(plan.pipelines[1].bucket_microbatches == std::vector<int>{3, 1});
  CHECK(validate_plan(plan, "p").empty());
  // Written and read back.
  auto back = read_plan(test::doc(write_plan(plan), "p.json"), {nullptr, nullptr, &test::catalog()});
  REQUIRE(back.ok());
  CHECK(back->pipelines[1].bucket_microbatches == std::vector<int>{3, 1});

  // Counts that do not add up are refused, naming the pipeline.
  Plan wrong = plan;
  wrong.pipelines[0].bucket_microbatches = {4, 1};
  auto errors = validate_plan(wrong, "p");
  INFO(test::text(errors));
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].path == "pipelines[0].seq_lengths");  // 5 micro-batches of 4
  CHECK(errors[1].message.find("14 sequences of length 8") != std::string::npos);  // not 12
  wrong = plan;
  wrong.pipelines[0].bucket_microbatches = {4, 0};
  wrong.pipelines[1].bucket_microbatches = {2, 2};
  CHECK(validate_plan(wrong, "p").empty());  // any split with the right totals
  // A length the model does not have.
  std::string text = write_plan(plan);
  text.replace(text.rfind("\"length\": 32"), 12, "\"length\": 16");  // the pipeline's (after the model's)
  auto bad = read_plan(test::doc(text, "p.json"), {nullptr, nullptr, &test::catalog()});
  REQUIRE_FALSE(bad.ok());
  INFO(test::text(bad.errors()));
  CHECK(test::text(bad.errors()).find("pipelines[1].seq_lengths[1].length: the model has no bucket of length 16") !=
        std::string::npos);
}

TEST_CASE("the simulator runs micro-batches of different costs: a 1F1B pipeline against its hand-computed timeline") {
  // Two stages, 1F1B (warm-ups 2, 1), micro-batch 0 short (forward 1, backward 2, sends 0.5),
  // micro-batch 1 long (3, 6, sends 1). By hand:
  //   s0: F0 0-1 (send 1-1.5), F1 1-4 (send 4-5)
  //   s1: F0 1.5-2.5, B0 2.5-4.5 (send back 4.5-5), F1 5-8, B1 8-14 (send back 14-15)
  //   s0: B0 5-7, B1 15-21                                                   -> 21
  sim::SimInput in;
  sim::PipelineInput p;
  p.num_microbatches = 2;
  p.warmup = {2, 1};
  p.stages = {{0, 0, 0, 0, 0, "s0", false}, {0, 0, 0, 0, 0, "s1", false}};
  p.kind = {0, 1};
  p.by_kind = {{{1, 2, 0.5, 0.5, 0, "", false}, {1, 2, 0, 0, 0, "", false}},
               {{3, 6, 1, 1, 0, "", false}, {3, 6, 0, 0, 0, "", false}}};
  in.pipelines = {p};
  auto r = sim::simulate(in);
  REQUIRE(r.ok());
  CHECK(r->iteration_s == Approx(21).epsilon(1e-12));
  CHECK(r->pipelines[0].stages[0].compute_s == Approx(1 + 3 + 2 + 6));
  // The same micro-batches in the other order: long first.
  in.pipelines[0].kind = {1, 0};
  //   s0: F0 0-3 (send 3-4), F1 3-4 (send 4-4.5); s1: F0 4-7, B0 7-13 (back 13-14), F1 13-14,
  //   B1 14-16 (back 16-16.5); s0: B0 14-20, B1 20-22                      -> 22
  r = sim::simulate(in);
  REQUIRE(r.ok());
  CHECK(r->iteration_s == Approx(22).epsilon(1e-12));
  // A kind without costs for every stage is an error, not a crash.
  in.pipelines[0].by_kind[1].pop_back();
  CHECK_FALSE(sim::simulate(in).ok());
}

TEST_CASE("a plan's iteration under a length distribution is its buckets' micro-batches, each costed at its length") {
  auto m = model_with("seq_lengths:\n  - {length: 8, share: 0.75}\n  - {length: 32, share: 0.25}\n");
  REQUIRE(m.ok());
  // One device: the iteration is Σ over micro-batches of forward + backward, then the
  // optimizer step (no sync). 6 micro-batches of 8 tokens, 2 of 32.
  Plan mixed = one_stage_pipelines(*m, {{"a100", 0}});
  cost::ComputeModel cm(mixed.model, {});
  auto o = predict::predict(mixed, cm, {});
  REQUIRE(o.ok());
  // Each length alone: the same stage with all its micro-batches of that length.
  auto alone = [&](int length, int microbatches) {
    ModelSpec one = at_length(*m, length);
    one.training.global_batch_size = 2 * microbatches;
    Plan p = one_stage_pipelines(one, {{"a100", 0}});
    auto r = predict::predict(p, cost::ComputeModel(one, {}), {});
    REQUIRE(r.ok());
    return r->stages[0][0];
  };
  const predict::StageDetail short8 = alone(8, 6), long32 = alone(32, 2);
  CHECK(long32.forward_s > 2 * short8.forward_s);  // the lengths cost differently
  const double opt = o->stages[0][0].optimizer_s;
  CHECK(opt == Approx(short8.optimizer_s));
  const double hand = 6 * (short8.forward_s + short8.backward_s) + 2 * (long32.forward_s + long32.backward_s) + opt;
  CHECK(o->plan.predicted->iteration_s == Approx(hand).epsilon(1e-12));
  CHECK(o->plan.predicted->tokens_per_s == Approx((6 * 2 * 8 + 2 * 2 * 32) / hand).epsilon(1e-12));
  // The stage's reported forward is the mean over its micro-batches.
  CHECK(o->stages[0][0].forward_s == Approx((6 * short8.forward_s + 2 * long32.forward_s) / 8).epsilon(1e-12));
  // Activation memory holds the longest bucket's micro-batches.
  CHECK(o->stages[0][0].memory.activations == Approx(long32.memory.activations).epsilon(1e-12));
}

TEST_CASE("lengths are assigned to pipelines of different shapes: the long micro-batches go to the faster pipeline") {
  auto m = model_with("seq_lengths:\n  - {length: 1024, share: 0.75}\n  - {length: 4096, share: 0.25}\n", kMidModel);
  REQUIRE(m.ok());
  // A V100 pipeline and an A100 pipeline, 4 micro-batches each, dealt 3 short + 1 long each.
  Plan plan = one_stage_pipelines(*m, {{"v100", 0}, {"a100", 0}});
  cost::ComputeModel cm(plan.model, {});
  auto a = search::assign_lengths(plan, cm, {});
  REQUIRE(a.ok());
  INFO(write_plan(a->outcome.plan));
  CHECK(a->outcome.plan.predicted->iteration_s < a->before_s * 0.99);
  CHECK(a->swaps >= 1);
  // The A100 pipeline runs both long micro-batches; the totals still hold.
  CHECK(a->outcome.plan.pipelines[1].bucket_microbatches == std::vector<int>{2, 2});
  CHECK(a->outcome.plan.pipelines[0].bucket_microbatches == std::vector<int>{4, 0});
  CHECK(validate_plan(a->outcome.plan, "p").empty());
  // Predicting the assigned plan again gives the same time.
  auto again = predict::predict(a->outcome.plan, cm, {});
  REQUIRE(again.ok());
  CHECK(again->plan.predicted->iteration_s == Approx(a->outcome.plan.predicted->iteration_s).epsilon(1e-12));
  // Without a distribution there is nothing to assign.
  Plan uniform = one_stage_pipelines(*model_with("", kMidModel), {{"v100", 0}, {"a100", 0}});
  auto u = search::assign_lengths(uniform, cost::ComputeModel(uniform.model, {}), {});
  REQUIRE(u.ok());
  CHECK(u->swaps == 0);
  CHECK(u->predictions == 1);
}

TEST_CASE("a sequence-length distribution changes the plan a search picks, and the plan it picks runs that mix faster") {
  // Hetu v2 §7.3's 32B Llama at a 16K context, 3/4 of its sequences 2K long (the shipped
  // config), on 16 H800 + 16 H20. HeteroAuto's planner (deterministic on one thread) plans it
  // twice: with the distribution, and as planners do without one, every sequence at the context
  // length. (HAPT's did until the model of TP stages' memory changed, 2026-11-28: its plan for
  // the mix now runs it 0.1% slower than its plan for the longest sequences.)
  auto m = load_model(HET_SOURCE_DIR "/configs/models/hetu-llama-32b-mixed-16k.yaml");
  REQUIRE(m.ok());
  REQUIRE(m->seq_lengths.size() == 3);
  auto c = load_cluster(HET_SOURCE_DIR "/configs/clusters/hetu-16h800-16h20.yaml", test::catalog());
  REQUIRE(c.ok());
  const ModelSpec longest = at_length(*m, m->seq_length);
  cost::ComputeModel cm_mixed(*m, {}), cm_longest(longest, {});
  search::Options o;
  o.threads = 1;
  auto mixed = search::run("heteroauto", *m, *c, cm_mixed, o);
  auto as_longest = search::run("heteroauto", longest, *c, cm_longest, o);
  REQUIRE(mixed.ok());
  REQUIRE(as_longest.ok());
  const Plan& a = mixed->plans.front().plan;
  const Plan& b = as_longest->plans.front().plan;
  INFO(write_plan(a));
  INFO(write_plan(b));
  CHECK(validate_plan(a, "mixed").empty());
  // Different plans: the stages' count or shapes differ.
  auto shape = [](const Plan& p) {
    std::vector<std::tuple<std::string, int, int, int, int, int, int>> out;
    for (const auto& q : p.pipelines)
      for (const auto& s : q.stages) out.emplace_back(s.subcluster, s.first, s.last, s.tp, s.cp, s.dp, int(s.recompute));
    return out;
  };
  CHECK(shape(a) != shape(b));
  // The plan made for the longest sequences, running the real mix (its micro-batches dealt
  // the same way), is slower than the plan made for the mix: the best of that search's plans
  // whose micro-batch divides every bucket's sequences (its very best may not: a micro-batch of
  // 2 cannot carry an odd bucket).
  std::optional<Plan> runs_mix;
  for (const auto& outcome : as_longest->plans) {
    Plan p = outcome.plan;
    p.model = *m;
    for (auto& q : p.pipelines)
      for (auto& s : q.stages) s.warmup.reset(), s.resharding.reset();
    if (spread_buckets(p)) {
      runs_mix = std::move(p);
      break;
    }
  }
  REQUIRE(runs_mix);
  Plan& b_on_mix = *runs_mix;
  REQUIRE(validate_plan(b_on_mix, "b").empty());
  auto b_time = predict::predict(b_on_mix, cm_mixed, {});
  REQUIRE(b_time.ok());
  CHECK(mixed->plans.front().plan.predicted->iteration_s < 0.99 * b_time->plan.predicted->iteration_s);
}

TEST_CASE("lengths are assigned only where every stage's cp divides them") {
  // 8 sequences of 15 tokens and 8 of 32; a fast pipeline (one A100) runs the short ones, a
  // slow one of cp 2 (two V100s) the long ones. Trading a short for a long would even them out,
  // but cp 2 cannot split 15 tokens: no swap is made, and the plan stays valid.
  auto m = model_with("seq_lengths:\n  - {length: 15, share: 0.5}\n  - {length: 32, share: 0.5}\n");
  REQUIRE(m.ok());
  Plan plan = one_stage_pipelines(*m, {{"a100", 0}, {"v100", 0}});
  Stage& slow = plan.pipelines[1].stages[0];
  slow.cp = 2;
  slow.devices = {{0, 0}, {0, 1}};
  plan.pipelines[0].bucket_microbatches = {4, 0};
  plan.pipelines[1].bucket_microbatches = {0, 4};
  REQUIRE(validate_plan(plan, "p").empty());
  cost::ComputeModel cm(plan.model, {});
  auto a = search::assign_lengths(plan, cm, {});
  REQUIRE(a.ok());
  CHECK(a->swaps == 0);
  CHECK(validate_plan(a->outcome.plan, "p").empty());
  // With cp 1 the same swap is taken: the slow pipeline sheds a long micro-batch.
  slow.cp = 1;
  slow.dp = 2;
  REQUIRE(validate_plan(plan, "p").empty());
  auto b = search::assign_lengths(plan, cm, {});
  REQUIRE(b.ok());
  CHECK(b->swaps >= 1);
  CHECK(b->outcome.plan.pipelines[1].bucket_microbatches[1] < 4);
}
