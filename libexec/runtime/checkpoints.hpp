#pragma once
// A rank's part of a checkpoint (checkpoint/checkpoint.hpp), in terms of its gradient-sync
// buckets (buckets.hpp): every element of every parameter is in exactly one sync group, and the
// group's members hold the same values and, between them, its AdamW moments — the whole
// bucket each, or with ZeRO one share each. So a checkpoint holds every element once when a
// rank writes the part of each bucket it owns under ZeRO, or, without ZeRO, the whole bucket
// where it is the group's first rank. Resuming, any plan's rank reads its parameters' values
// whole and the moments of the part of each bucket it owns.
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "diag/diag.hpp"
#include "replan/replan.hpp"
#include "runtime/buckets.hpp"

namespace het::runtime {

// Why `model` cannot resume from `from` (empty when it can): another architecture or size, or
// another sequence length or global batch (the data position would mean other sequences).
std::string resume_problem(const checkpoint::Checkpoint& from, const ModelSpec& model);

// The pieces `rank` writes (values, m and v of the same elements); `everything`: every bucket's
// part it holds, not only those it owns (a rescue, checkpoint::write_rescue).
std::vector<checkpoint::PieceOut> checkpoint_pieces(const std::vector<Bucket>& buckets, int rank, bool zero, bool everything = false);

// How a rescue's bytes reach the device `to` from the device `from` that held them, both named
// "SUB/NODE:DEVICE": in place (the same device), intra-node, inter-node (a subcluster's nodes) or
// between subclusters — replan's routes, in the order that is also the preference (fastest link
// first) by which a rank chooses among holders.
replan::Route route_between(const std::string& from, const std::string& to);

// Reads every parameter's values and the moments of the owned part of every bucket of this
// rank from `from`. Errors: a tensor the checkpoint lacks or holds in another shape (another
// model), an unreadable file.
Result<Done> load_checkpoint(const checkpoint::Checkpoint& from, const std::vector<model::Param<float>*>& params,
                             std::vector<Bucket>& buckets);

}  // namespace het::runtime
