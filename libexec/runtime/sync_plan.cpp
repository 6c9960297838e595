#include "runtime/sync_plan.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace het::runtime {

bool tp_sharded(const std::string& name) {
  const auto dot = name.rfind('.');
  const std::string base = dot == std::string::npos ? name : name.substr(dot + 1);
  static const std::set<std::string> names = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "wfc", "bfc", "wproj",
                                              "wgate", "wup", "wdown"};
  return names.count(base) > 0;
}

namespace {

// The units parameter `name` belongs to, lowest and highest (predict's families): layerN unit
// N + 1; the embedding's 0; gpt's tied wte 0 and the head's; the head's own the last.
std::pair<int, int> units_of(const Plan& plan, const std::string& n) {
  const int last = plan.model.num_layers + 1;
  if (n.rfind("layer", 0) == 0) {
    const int unit = std::stoi(n.substr(5, n.find('.') - 5)) + 1;
    return {unit, unit};
  }
  if (n == "wte") return {0, plan.model.architecture == Architecture::gpt ? last : 0};
  if (n == "wpe") return {0, 0};
  return {last, last};
}

// Whether a stage holds parameter `name`: one of its units (gpt's tied wte: either end).
bool holds(const Plan& plan, const Stage& o, const std::string& n) {
  const auto [lo, hi] = units_of(plan, n);
  return (o.first <= lo && lo <= o.last) || (o.first <= hi && hi <= o.last);
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
  // Groups by lowest unit, descending, then highest unit, then ranks (predict::sync_buckets):
  // the order the backward finishes them, gpt's tied embedding after each end's own. The key
  // is the group's (every member holds the same parameters in it): one order on every rank.
  std::map<std::vector<int>, std::pair<int, int>> span;  // group -> (lowest, highest) unit
  for (const SyncChunk& c : sync) {
    const auto [lo, hi] = units_of(plan, params[c.param].name);
    auto [it, fresh] = span.emplace(c.group, std::pair<int, int>{lo, hi});
    if (!fresh) it->second = {std::min(it->second.first, lo), std::max(it->second.second, hi)};
  }
  std::sort(sync.begin(), sync.end(), [&](const SyncChunk& a, const SyncChunk& b) {
    if (a.group != b.group) {
      const auto sa = span.at(a.group), sb = span.at(b.group);
      return std::make_tuple(-sa.first, sa.second, std::cref(a.group)) < std::make_tuple(-sb.first, sb.second, std::cref(b.group));
    }
    if (params[a.param].name != params[b.param].name) return params[a.param].name < params[b.param].name;
    return a.chunk < b.chunk;
  });
  return sync;
}

}  // namespace het::runtime
