// Where a rank's parameters sit (program/shards.hpp): the TP shards of a layer tile each of its
// tensors exactly once, and the executor's stage holds exactly the pieces the planner lists, in
// the same order, so that what the planner counts (hetplan replan) is what ranks hold.
#include <catch2/catch.hpp>

#include <map>

#include "model/stage.hpp"
#include "program/shards.hpp"
#include "spec/model.hpp"

using namespace het;

namespace {
ModelSpec load(const std::string& name) {
  auto m = load_model(HET_SOURCE_DIR "/configs/models/" + name + ".yaml");
  REQUIRE(m.ok());
  return *m;
}
std::int64_t full_elements(const program::Slice& s) {
  std::int64_t n = 1;
  for (auto d : s.shape) n *= d;
  return n;
}
}  // namespace

TEST_CASE("the TP shards of a layer tile every tensor exactly once: split ones split, vectors and norms whole on every shard") {
  for (const std::string name : {"tiny-gpt", "tiny-llama"}) {
    const ModelSpec m = load(name);
    for (int tp : {1, 2, 4}) {
      if (m.num_kv_heads % tp != 0 || m.ffn_hidden_size % tp != 0) continue;  // no such plan validates
      INFO(name << " tp " << tp);
      std::map<std::string, std::vector<program::Slice>> by_tensor;
      for (int r = 0; r < tp; ++r)
        for (auto& p : program::layer_pieces(m, 2, r, tp)) {
          CHECK(p.name.rfind("layer2.", 0) == 0);
          by_tensor[p.name].push_back(p.slice);
        }
      CHECK(by_tensor.size() == (m.architecture == Architecture::gpt ? 16u : 9u));
      for (const auto& [tensor, slices] : by_tensor) {
        INFO(tensor);
        REQUIRE(int(slices.size()) == tp);
        const std::int64_t full = full_elements(slices[0]);
        std::int64_t held = 0;
        for (std::size_t a = 0; a < slices.size(); ++a) {
          CHECK(slices[a].shape == slices[0].shape);
          held += slices[a].elements();
          for (std::size_t b = a + 1; b < slices.size(); ++b) {
            if (slices[a].elements() == full) CHECK(slices[a].common(slices[b]) == full);  // whole on every shard
            else CHECK(slices[a].common(slices[b]) == 0);                                  // split: disjoint
          }
        }
        CHECK((held == full || held == full * tp));
        if (tp > 1 && (tensor.ends_with(".wq") || tensor.ends_with(".wo") || tensor.ends_with(".wk"))) CHECK(held == full);
      }
    }
  }
}

TEST_CASE("the executor's stage holds exactly the pieces the planner lists, in order, embedding and head included") {
  for (const std::string name : {"tiny-gpt", "tiny-llama"}) {
    const ModelSpec m = load(name);
    const int L = m.num_layers;
    for (auto [first, last] : {std::pair{0, L + 1}, std::pair{0, 1}, std::pair{2, L}, std::pair{L, L + 1}, std::pair{L + 1, L + 1}})
      for (int tp : {1, 2})
        for (int rank = 0; rank < tp; ++rank) {
          INFO(name << " units " << first << "-" << last << " tp " << tp << " rank " << rank);
          model::StageModel<float> stage(m, first, last, rank, tp, 7);
          const auto pieces = program::stage_pieces(m, first, last, rank, tp);
          const auto params = stage.params();
          REQUIRE(params.size() == pieces.size());
          for (std::size_t i = 0; i < pieces.size(); ++i) {
            INFO(pieces[i].name);
            CHECK(params[i]->name == pieces[i].name);
            CHECK(params[i]->slice.shape == pieces[i].slice.shape);
            CHECK(params[i]->slice.common(pieces[i].slice) == pieces[i].slice.elements());
            CHECK(std::int64_t(params[i]->value.size()) == pieces[i].slice.elements());
          }
        }
  }
}
