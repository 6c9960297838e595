// The gradient sync's plan (libexec/runtime/sync_plan): on a plan whose two pipelines hold the
// same layers with different TP, every rank's chunks cover each of its parameters exactly once,
// every member of a chunk's group plans the same chunk with the same group and size, and any
// two ranks meet their common groups in the same order (so the collectives cannot deadlock).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "backend/backend.hpp"
#include "program/program.hpp"
#include "predict/stage_cost.hpp"
#include "runtime/sync_plan.hpp"
#include "test_util.hpp"

using namespace het;

TEST_CASE("the gradient sync plan: whole coverage, agreeing groups, one order (pipelines of different TP)") {
  InputFiles files;
  files.plan = HET_SOURCE_DIR "/tests/data/plans/two-pipelines-tp.plan.json";
  files.model = HET_SOURCE_DIR "/configs/models/tiny-gpt.yaml";
  files.cluster = HET_SOURCE_DIR "/configs/clusters/demo-1x4a100-1x4v100.yaml";
  auto loaded = load_plan_inputs(files);
  REQUIRE(loaded.ok());
  const Plan& plan = loaded->plan;
  const program::Topology topo(plan);
  REQUIRE(topo.ranks() == 5);
  auto backend = backend::open("cpu", 1);
  REQUIRE(backend.ok());

  struct Key {
    std::string name;
    int chunk;
    auto operator<=>(const Key&) const = default;
  };
  std::vector<std::vector<runtime::SyncChunk>> plans(5);
  std::vector<std::vector<runtime::LocalParam>> params(5);
  std::map<std::pair<Key, int>, const runtime::SyncChunk*> by_rank;  // (chunk, rank) -> chunk
  for (int r = 0; r < topo.ranks(); ++r) {
    const Stage& st = topo.stage_of(r);
    backend::StageSpec spec{plan.model, st.first, st.last, topo.place(r).shard, st.tp, 1, st.recompute, {}, {}};
    auto stage = (*backend)->make_stage(spec);
    for (const auto* p : stage->params()) params[std::size_t(r)].push_back({p->name, p->value.size()});
    plans[std::size_t(r)] = runtime::plan_sync(plan, topo, r, params[std::size_t(r)]);
    // Coverage: each element of each parameter in exactly one chunk.
    std::vector<std::vector<int>> seen(params[std::size_t(r)].size());
    for (std::size_t i = 0; i < seen.size(); ++i) seen[i].assign(params[std::size_t(r)][i].size, 0);
    for (const auto& c : plans[std::size_t(r)]) {
      INFO("rank " << r << " " << params[std::size_t(r)][c.param].name << " chunk " << c.chunk);
      for (std::size_t e = 0; e < c.elements.size(); ++e) ++seen[c.param].at(c.elements.index(e));
      CHECK(std::find(c.group.begin(), c.group.end(), r) != c.group.end());
      CHECK(std::is_sorted(c.group.begin(), c.group.end()));
      // A parameter every shard holds whole counts 1/tp; a sharded one is summed whole.
      CHECK(c.weight == Approx(runtime::tp_sharded(params[std::size_t(r)][c.param].name) ? 1.0 : 1.0 / st.tp));
      by_rank[{{params[std::size_t(r)][c.param].name, c.chunk}, r}] = &c;
    }
    for (std::size_t i = 0; i < seen.size(); ++i) {
      INFO("rank " << r << " " << params[std::size_t(r)][i].name);
      CHECK(std::count(seen[i].begin(), seen[i].end(), 1) == std::ptrdiff_t(seen[i].size()));
    }
  }
  // Agreement: every member of a chunk's group plans it with the same group and size.
  for (const auto& [at, c] : by_rank) {
    for (int g : c->group) {
      INFO(at.first.name << " chunk " << at.first.chunk << " of rank " << at.second << " in rank " << g);
      auto it = by_rank.find({at.first, g});
      REQUIRE(it != by_rank.end());
      CHECK(it->second->group == c->group);
      CHECK(it->second->elements.size() == c->elements.size());
    }
  }
  // The tied token embedding of gpt: the first stages and the last stages of both pipelines.
  const auto* wte = by_rank.at({{"wte", 0}, 0});
  CHECK(wte->group == std::vector<int>{0, 1, 2, 3, 4});
  // It is the last bucket of every rank that holds it, after the ends' own (predict::sync_buckets):
  // the last stages reduce their own while the first are still in their backward.
  int before_it = 0;  // own chunks reduced before it
  for (int r = 0; r < 5; ++r) {
    const auto& mine = plans[std::size_t(r)];
    INFO("rank " << r);
    REQUIRE(!mine.empty());
    CHECK(mine.back().group == wte->group);
    for (const auto& c : mine) before_it += c.group != wte->group;
  }
  CHECK(before_it > 0);
  // A layer held with tp 2 (pipeline 0) and tp 1 (pipeline 1, stage 0): chunks of the finest
  // sharding, so rank 2 (tp 1) syncs two chunks of layer0.wq, one with each of ranks 0 and 1.
  CHECK(by_rank.at({{"layer0.wq", 0}, 2})->group == std::vector<int>{0, 2});
  CHECK(by_rank.at({{"layer0.wq", 1}, 2})->group == std::vector<int>{1, 2});
  // One order: any two ranks list the chunks they share in the same order.
  for (int a = 0; a < 5; ++a)
    for (int b = a + 1; b < 5; ++b) {
      auto shared = [&](int r) {
        std::vector<Key> out;
        for (const auto& c : plans[std::size_t(r)]) {
          const bool both = std::find(c.group.begin(), c.group.end(), a) != c.group.end() &&
                            std::find(c.group.begin(), c.group.end(), b) != c.group.end();
          if (both) out.push_back({params[std::size_t(r)][c.param].name, c.chunk});
        }
        return out;
      };
      INFO("ranks " << a << " and " << b);
      CHECK(shared(a) == shared(b));
    }
}

// The planner costs the sync bucket by bucket (predict::sync_buckets); the runtime reduces one
// bucket per group of its chunks. On every plan shape the executor tests run, shard 0 of every
// stage's first replica meets exactly the planner's buckets of that stage: the same groups
// (ranks), in the same order, with the same elements per rank.
TEST_CASE("the planner's sync buckets are the runtime's groups, in its order, with its sizes") {
  for (const char* name : {"pipeline", "data", "tensor", "context", "mixed", "two-pipelines", "recompute"})
    for (const char* model : {"tiny-gpt", "tiny-llama"}) {
      InputFiles files;
      files.plan = std::string(HET_SOURCE_DIR "/tests/data/plans/") + name + ".plan.json";
      files.model = std::string(HET_SOURCE_DIR "/configs/models/") + model + ".yaml";
      files.cluster = HET_SOURCE_DIR "/configs/clusters/demo-1x4a100-1x4v100.yaml";
      auto loaded = load_plan_inputs(files);
      REQUIRE(loaded.ok());
      const Plan& plan = loaded->plan;
      const program::Topology topo(plan);
      auto backend = backend::open("cpu", 1);
      REQUIRE(backend.ok());
      const auto buckets = predict::sync_buckets(plan);
      for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
        for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
          INFO(name << " " << model << ": pipeline " << p << " stage " << s);
          const int r = topo.rank(int(p), int(s), 0);
          const Stage& st = topo.stage_of(r);
          backend::StageSpec spec{plan.model, st.first, st.last, 0, st.tp, 1, st.recompute, {}, {}};
          auto stage = (*backend)->make_stage(spec);
          std::vector<runtime::LocalParam> params;
          for (const auto* q : stage->params()) params.push_back({q->name, q->value.size()});
          std::vector<std::pair<std::vector<int>, double>> runtime_groups;  // (group, elements), in order, rings only
          for (const auto& c : runtime::plan_sync(plan, topo, r, params)) {
            if (c.group.size() <= 1) continue;
            if (runtime_groups.empty() || runtime_groups.back().first != c.group) runtime_groups.push_back({c.group, 0});
            runtime_groups.back().second += double(c.elements.size());
          }
          std::vector<std::pair<std::vector<int>, double>> planned;
          for (const auto& b : buckets)
            if (std::find(b.members.begin(), b.members.end(), std::pair<int, int>(int(p), int(s))) != b.members.end())
              planned.push_back({b.order, b.elements * b.collectives});
          REQUIRE(planned.size() == runtime_groups.size());
          for (std::size_t k = 0; k < planned.size(); ++k) {
            CHECK(planned[k].first == runtime_groups[k].first);
            CHECK(planned[k].second == Approx(runtime_groups[k].second));
          }
        }
    }
}
