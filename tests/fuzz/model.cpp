// Feeds: any bytes as a model file (model.yaml: input::parse, then read_model of the root).
// Checks: no crash, hang or unbounded memory; a refusal names the file; an accepted model's
// parameter counts are computed without overflow (UBSan), and to_json(model) reads back to the
// same model (model.hpp: "read_model() reads it back").
#include "fuzz.hpp"
#include "spec/model.hpp"

using namespace het;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "model.yaml");
  if (!doc) return 0;  // the input harness covers the parser's refusals
  auto model = read_model(doc->file, doc->root, "");
  if (!model) {
    fuzz::require_explained(model.errors(), "model.yaml");
    return 0;
  }
  fuzz::require(parameter_count(*model) > 0 && layer_parameter_count(*model) > 0, "a valid model has parameters");
  fuzz::require_round_trip(
      to_json(*model).dump(1), [](const input::Document& d) { return read_model(d.file, d.root, ""); },
      [](const ModelSpec& m) { return to_json(m).dump(1); }, "to_json(model) reads back to the same model");
  return 0;
}
