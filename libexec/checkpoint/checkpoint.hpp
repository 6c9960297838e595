#pragma once
// Checkpoints (issue 19): the parameters' fp32 values and AdamW moments of a job, written by
// every rank in parallel and readable by any other plan of the same model.
//
// Layout of a checkpoint directory D (--checkpoint-dir):
//   D/step-00000006/manifest.json            what the checkpoint holds; written last
//   D/step-00000006/rank-00003.safetensors   rank 3's part (safetensors.hpp)
//   D/.step-00000006.partial/                 a checkpoint being written: never read
// Every element of every tensor is written once, by the rank that owns it (its gradient-sync
// group's owner, runtime/checkpoint_parts.hpp), as "pieces": a piece is a list of Spans of the
// full tensor's (row-major) elements, stored in a rank's file as three F32 arrays, KEY:value,
// KEY:m and KEY:v. The manifest names, for every tensor, its full shape and where each of its
// pieces is (file, key, spans), plus the plan it was written under, the model, the next step
// (the data position: step s reads the global batch of step s) and what the caller adds.
//
// Atomic: ranks write their files into the .partial directory (each file written to a temporary
// name, fsync'd, renamed); rank 0 writes the manifest the same way once every rank reported, then
// renames the directory to step-N and syncs D. A crash at any point leaves the previous
// checkpoint the newest complete one (a directory step-N with a manifest).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.hpp"
#include "diag/diag.hpp"
#include "model/params.hpp"

namespace het::checkpoint {

// `count` runs of `run` consecutive elements of a tensor (row-major indices), run k starting at
// start + k·stride.
struct Span {
  std::int64_t start = 0, run = 0, stride = 0, count = 1;
  std::int64_t size() const { return run * count; }
  friend bool operator==(const Span&, const Span&) = default;
};

// The spans of the full tensor that a shard's local elements form, taking the local elements in
// `ranges` ([first, first + n) each, in order) through slice.global(); consecutive runs of equal
// length at equal distance become one span.
std::vector<Span> spans_of(const model::Slice& slice, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges);

// One piece a rank writes: elements of a tensor and their values and moments, in span order.
struct PieceOut {
  std::string tensor;               // "layer3.wq"
  std::vector<std::int64_t> shape;  // the full tensor's
  std::vector<Span> spans;
  std::vector<float> value, m, v;   // [total size of spans] each
};

// "D/step-00000006", "D/.step-00000006.partial", "rank-00003.safetensors".
std::string step_dir(const std::string& root, int step);
std::string partial_dir(const std::string& root, int step);
std::string rank_file(int rank);

// Writes rank `rank`'s pieces into the partial directory of `step` under `root` (created if
// missing). Returns what rank 0 needs for the manifest: {"file", "bytes", "tensors": {name:
// {"shape", "pieces": [{"key", "spans"}]}}} ("file" empty when the rank owns nothing).
// `progress` as safetensors::write's.
Result<nlohmann::json> write_rank(const std::string& root, int step, int rank, const std::vector<PieceOut>& pieces,
                                  const Progress& progress = {});

// Rank 0, once every rank's write_rank() answer is in `ranks`: writes the manifest
// ({"format", "version", "step", "ranks", "tensors"} and the fields of `about`), makes the
// checkpoint visible, then removes complete checkpoints beyond the newest `keep` (0: none) and
// partial ones of steps up to this. Returns the checkpoint's directory and its bytes.
struct Committed {
  std::string dir;
  std::uint64_t bytes = 0;  // values and moments of every rank
};
Result<Committed> commit(const std::string& root, int step, const nlohmann::json& about, const std::vector<nlohmann::json>& ranks,
                         int keep);

// The complete checkpoints under `root`, oldest first (directories step-N with a manifest).
std::vector<std::string> complete_checkpoints(const std::string& root);

enum class Field { value, m, v };

// A checkpoint open for reading. open() takes a checkpoint's directory or a root holding them
// (then its newest complete one); it checks the manifest and that the pieces of every tensor
// cover it exactly once. Errors name the manifest or file and the field.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& path);
  // The state the surviving ranks of a failed job left in `dir` (write_rescue(), below): the
  // newest step at which their pieces hold every element of every tensor in `tensors` (name:
  // full shape), as a checkpoint of that step whose manifest has the writers' `about`, "step",
  // "files" and "holders" (each file's holder). Where several hold an element it is read from
  // the holder `preference` ranks lowest (then the lower rank). nullopt: no step is whole (a
  // part lost every holder, or the survivors stopped at different steps) or nothing is there.
  static std::optional<Checkpoint> open_rescue(const std::string& dir, const std::map<std::string, std::vector<std::int64_t>>& tensors,
                                               const std::function<int(const std::string& holder)>& preference);
  const std::string& dir() const { return dir_; }
  int step() const { return step_; }  // the next step to run
  const nlohmann::json& manifest() const { return manifest_; }
  // Tensor names and full shapes, by name.
  const std::map<std::string, std::vector<std::int64_t>>& shapes() const { return shapes_; }
  // The elements of `tensor` at `spans`, in order, into out[total size]; its full shape must be
  // `shape` (a different model is an error naming the tensor).
  Result<Done> read(const std::string& tensor, const std::vector<std::int64_t>& shape, Field field, const std::vector<Span>& spans,
                    float* out) const;
  // Elements read so far from each file (the manifest's "files" order), by read().
  const std::vector<std::uint64_t>& elements_read() const { return elements_read_; }

 private:
  struct Stored {
    std::int64_t start = 0, n = 0;  // a contiguous run of the tensor
    int file = 0;                   // index into files_
    std::string key;                // the piece's key in the file
    std::int64_t at = 0;            // its first element's place in the piece
  };
  std::string dir_;
  int step_ = 0;
  nlohmann::json manifest_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
  std::map<std::string, std::vector<Stored>> stored_;  // by start
  std::vector<std::shared_ptr<Reader>> files_;
  mutable std::vector<std::uint64_t> elements_read_;
  // The checkpoint `manifest` describes (read from `file`, for errors) in `dir`. `preference`
  // empty: every element must be in exactly one piece; else one number per file, lower
  // preferred, and an element several pieces hold is read from the most preferred.
  static Result<Checkpoint> parse(const std::string& dir, nlohmann::json manifest, const std::string& file,
                                  const std::vector<int>& preference);
  // Of runs that may overlap, the parts each element's most preferred holder has.
  static std::vector<Stored> choose(std::vector<Stored> runs, const std::vector<int>& preference);
};

// A surviving rank's state after a failure (submit --elastic): everything it holds — its
// parameters' values and moments, a replica's as much as a gradient-sync group owner's — at
// `step` (the next step to run), into the failed job's rescue directory `dir`:
//   dir/.step-N.partial/rank-R.safetensors   as write_rank() writes a checkpoint's part
//   dir/rank-R.json                          {"step", "holder", "about", "answer"}, written last
// `holder` names the device the rank ran on ("a100/0:1": its agent's node and device).
Result<Done> write_rescue(const std::string& dir, int step, int rank, const std::string& holder, const nlohmann::json& about,
                          const std::vector<PieceOut>& pieces);

}  // namespace het::checkpoint
