#pragma once
// The gradient sync's plan (DESIGN.md §9): after the last backward, which ranks sum which part
// of each of a rank's parameters. Pure: the same plan, rank and parameters give the same
// chunks on every rank, in the order in which every rank asks for their groups.
//
// Every parameter's gradient is summed over all ranks that hold the same slice of it
// (data-parallel replicas, context members, pipelines, and — for gpt's tied token embedding —
// the first and last stages). A parameter that every TP shard holds whole counts each copy
// 1/tp. A TP-sharded parameter held with different TP degrees (pipelines of different TP) is
// synced in chunks of the finest sharding, F = lcm of the holders' tp (HexiScale §3.2; Hetu's
// SplitAR): chunk c is held by shard c / (F / tp) of every holder.
#include <cstddef>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "program/program.hpp"

namespace het::runtime {

// A parameter of the rank's stage: its name ("layer3.wq", "wte", ...) and local element count.
struct LocalParam {
  std::string name;
  std::size_t size = 0;
};

// Which local elements of a parameter a chunk is: `count` runs of `run` consecutive elements,
// run r starting at start + r·stride (a TP chunk of a [C, cols] matrix's columns: one run per
// row). Element i of the chunk is local index start + (i / run)·stride + i % run.
struct Elements {
  std::size_t start = 0, run = 0, stride = 0, count = 1;
  std::size_t size() const { return run * count; }
  std::size_t index(std::size_t i) const { return start + (i / run) * stride + i % run; }
};

struct SyncChunk {
  std::vector<int> group;             // the job ranks that sum it, ascending
  std::size_t param = 0;              // index into the rank's parameters
  int chunk = 0;                      // 0 for a whole parameter
  Elements elements;                  // its local elements in the parameter
  float weight = 1;                   // 1/tp for a copy every TP shard holds whole
};

// The chunks of `rank`'s parameters, by group in the order every rank reduces them (by the
// group's lowest unit, descending, then its highest, then its ranks: predict::sync_buckets),
// then by name and chunk.
std::vector<SyncChunk> plan_sync(const Plan& plan, const program::Topology& topology, int rank,
                                 const std::vector<LocalParam>& params);

// Whether a parameter is split across TP shards (the others are whole on every shard).
bool tp_sharded(const std::string& name);

}  // namespace het::runtime
