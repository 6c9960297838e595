#include "runtime/sync_plan.hpp"

#include <algorithm>
#include <numeric>
#include <set>

namespace het::runtime {

bool tp_sharded(const std::string& name) {
  const auto dot = name.rfind('.');
  const std::string base = dot == std::string::npos ? name : name.substr(dot + 1);
  static const std::set<std::string> names = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "wfc", "bfc", "wproj",
                                              "wgate", "wup", "wdown"};
  return names.count(base) > 0;
}

namespace {

// Whether a stage holds parameter `name` (layerN.*: unit N + 1; wte: the embedding, and for gpt
// the head, whose logits reuse it; wpe: the embedding; the rest: the head).
bool holds(const Plan& plan, const Stage& o, const std::string& n) {
  if (n.rfind("layer", 0) == 0) {
    const int layer = std::stoi(n.substr(5, n.find('.') - 5));
    return o.first <= layer + 1 && layer + 1 <= o.last;
  }
  if (n == "wte") return o.first == 0 || (o.last == plan.model.num_layers + 1 && plan.model.architecture == Architecture::gpt);
  if (n == "wpe") return o.first == 0;
  return o.last == plan.model.num_layers + 1;  // lnf_w, lnf_b, wout
}

}  // namespace

std::vector<SyncChunk> plan_sync(const Plan& plan, const program::Topology& topo, int me,
                                 const std::vector<LocalParam>& params) {
  const program::Place here = topo.place(me);
  const Stage& st = topo.stage_of(me);
  std::vector<SyncChunk> sync;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string& n = params[i].name;
    std::vector<int> holders;
    int F = 1;
    for (int r = 0; r < topo.ranks(); ++r) {
      if (!holds(plan, topo.stage_of(r), n)) continue;
      holders.push_back(r);
      F = std::lcm(F, topo.stage_of(r).tp);
    }
    const std::size_t local = params[i].size;
    if (!tp_sharded(n)) {
      sync.push_back({holders, i, 0, Elements{0, local, local, 1}, 1.0f / float(st.tp)});
      continue;
    }
    const int per = F / st.tp;  // my chunks: [shard·per, (shard+1)·per)
    const std::string base = n.substr(n.rfind('.') + 1);
    const bool columns = base == "wo" || base == "wproj" || base == "wdown";  // [C, local cols]
    for (int k = 0; k < per; ++k) {
      SyncChunk chunk{{}, i, here.shard * per + k, {}, 1.0f};
      for (int r : holders)
        if (topo.place(r).shard == chunk.chunk / (F / topo.stage_of(r).tp)) chunk.group.push_back(r);
      if (columns) {
        const std::size_t rows = std::size_t(plan.model.hidden_size), cols = local / rows, w = cols / std::size_t(per);
        chunk.elements = {std::size_t(k) * w, w, cols, rows};
      } else {
        const std::size_t w = local / std::size_t(per);
        chunk.elements = {std::size_t(k) * w, w, w, 1};
      }
      sync.push_back(std::move(chunk));
    }
  }
  std::sort(sync.begin(), sync.end(), [&](const SyncChunk& a, const SyncChunk& b) {
    if (a.group != b.group) return a.group < b.group;
    if (params[a.param].name != params[b.param].name) return params[a.param].name < params[b.param].name;
    return a.chunk < b.chunk;
  });
  return sync;
}

}  // namespace het::runtime
