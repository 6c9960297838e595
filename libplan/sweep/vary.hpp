#pragma once
// What-if sweeps (`hetplan sweep`, issue 22): one field of the model or the cluster document
// given several values, each point planned as `hetplan search` plans it.
//
// parse_vary() reads `PATH=V1,V2,...` or `PATH=LO..HI[/N]`:
//  - PATH is a field of the model or the cluster document, in the path syntax of our error
//    messages: `links[0].bandwidth`, `subclusters[1].nodes`, `subclusters[v100].nodes` (a list
//    entry by its `name`), `training.global_batch_size`, `num_layers`. A path whose first key
//    both documents have (`name`) takes a `model.` or `cluster.` prefix.
//  - Values are written into the document as given (units included: `10Gbit/s`), so the
//    document's reader checks them as it checks a file, with their errors.
//  - A range LO..HI has N points (both ends included; N at least 2): spaced by a constant
//    ratio when 0 < LO and HI/LO >= 10 (bandwidths, batch sizes), else evenly. Without /N:
//    every whole number from LO to HI when both are whole and there are at most 33, else 8
//    points. LO and HI carry the same unit (or none). Evenly spaced points of a range of
//    whole numbers must be whole (0..4/3 is 0, 2, 4; 0..4/4 is refused, never rounded).
// apply() sets the field to one value in a copy of the document. The field must exist (a
// typo is an error, not a new key), and a list index must be in range. Setting a
// subcluster's `nodes` to 0 removes the subcluster and every link that names it: "what do
// the V100s add" is a sweep from 0 nodes.
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "diag/diag.hpp"

namespace het::sweep {

enum class Target { model, cluster };

struct Vary {
  std::string path;                 // as given, less a `model.` or `cluster.` prefix
  std::optional<Target> target;     // the prefix's
  std::vector<std::string> values;  // as written into the document
  std::vector<double> numbers;      // each value's number (for plots), when all have one; else empty
  std::string unit;                 // the values' unit, as written ("Gbit/s"), or empty
  bool ratio = false;               // a range spaced by a constant ratio (a plot's log axis)
};

// `text` as given to --vary; errors name the option.
Result<Vary> parse_vary(const std::string& text);

// Which document the path is in: the prefix's, else the one whose root has the path's first
// key. `model_root` may be null (a model that is not a YAML document: a Hugging Face config).
Result<Target> target_of(const Vary& vary, const YAML::Node* model_root, const YAML::Node& cluster_root);

// A copy of `root` (read from `file`) with the field at `path` set to `value`.
Result<YAML::Node> apply(const YAML::Node& root, const std::string& file, const std::string& path, const std::string& value);

}  // namespace het::sweep
