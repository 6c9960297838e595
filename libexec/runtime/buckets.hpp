#pragma once
// The gradient sync's buckets and the optimizer step on them (DESIGN.md §9). A rank's sync
// chunks (sync_plan.hpp) are packed by group into buckets, one collective each (as the planner
// costs them: predict::sync_buckets), in the groups' order; AdamW runs on the part of each
// bucket the rank owns (all of it, or with ZeRO its 1/|group|), each parameter's slice with its
// own weight decay. `hetexec profile` times the optimizer step on whole_bucket(), the same code.
// A device backend (backend.hpp's DeviceOptimizer) keeps the buckets in device memory
// (on_device()): the same moves run there, the collectives on device memory where the group
// can (NCCL), else staged through the bucket's host buffers; masters and moments reach the host
// only for checkpoints (pull_state / push_state).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "collective/collective.hpp"
#include "model/params.hpp"
#include "plan/plan.hpp"
#include "program/program.hpp"
#include "runtime/sync_plan.hpp"

namespace het::runtime {

struct Bucket {
  std::vector<int> group;             // the job ranks that sum it, ascending
  collective::Group* comm = nullptr;  // over group (connect()); null for a group of one
  struct Part {
    SyncChunk chunk;
    model::Param<float>* param;
    std::size_t at = 0;  // offset in the bucket
  };
  std::vector<Part> parts;
  std::size_t size = 0;
  std::size_t lo = 0, hi = 0;      // the owned part of the bucket
  std::vector<float> m, v;         // AdamW moments of the owned part [hi - lo] (on the host)
  std::vector<float> grad, value;  // the packed buffers [size] (on the host; with a device, for staging only)
  backend::DeviceOptimizer* device = nullptr;  // where it lives when not on the host
  std::size_t index = 0;                       // its number there
};

// The buckets of `rank`'s parameters, in the order every member reduces them, with their packed
// buffers; the part each owns, and its AdamW moments, come with connect().
std::vector<Bucket> buckets_of(const Plan& plan, const program::Topology& topology, int rank,
                               const std::vector<model::Param<float>*>& params);
// One bucket of all the parameters, owned whole and summed by no one.
Bucket whole_bucket(const std::vector<model::Param<float>*>& params);
// Gives every bucket its group (asked for in the buckets' order) and the part of it this rank
// owns (all of it, or with ZeRO its share), with zeroed moments. Errors: the fabric's.
Result<Done> connect(std::vector<Bucket>& buckets, collective::Fabric& fabric, std::uint32_t tag, bool zero);

// Moves the buckets to the stage's device when its backend keeps the step there (after
// connect(); a no-op for the CPU backend): the host keeps only the staging buffers of groups
// without device memory. Errors: the backend's.
Result<Done> on_device(std::vector<Bucket>& buckets, backend::Stage& stage);
// A checkpoint's view of device buckets: the masters into the parameters' host values and the
// moments into b.m, b.v (pull_state), or back (push_state). No-ops for host buckets.
void pull_state(std::vector<Bucket>& buckets);
void push_state(std::vector<Bucket>& buckets);

// The collectives of the step on b's gradients (all-reduce, or with ZeRO reduce-scatter) and
// values (all-gather), wherever the bucket lives. Errors: the group's.
Result<Done> sum_gradients(Bucket& b, bool zero);
Result<Done> gather_values(Bucket& b);

// The parameters' gradients into b.grad, each chunk times its weight (1/tp for a copy every TP
// shard holds whole).
void pack_gradients(Bucket& b);
// AdamW step `step` (from 1) on the owned part of b.grad (summed by then), from the
// parameters' values; the values go back to the parameters unless `zero` (then after the
// all-gather of b.value: unpack_values()).
void update(Bucket& b, const model::AdamW& adamw, int step, bool zero);
void unpack_values(Bucket& b);

}  // namespace het::runtime
