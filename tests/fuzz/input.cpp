// Feeds: any bytes, as the text of a user's YAML or JSON document (input::parse, under every
// reader of models, clusters, catalogs, profiles and plans).
// Checks: no crash, hang or unbounded memory; a refusal names the file and says why; an
// accepted document's input::to_json (which a plan uses to embed documents) is JSON text that
// parses back to the same JSON (input.hpp: "read back, gives every scalar's text unchanged").
#include "fuzz.hpp"

using namespace het;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = input::parse(fuzz::text(data, size), "fuzz.yaml");
  if (!doc) {
    fuzz::require_explained(doc.errors(), "fuzz.yaml");
    return 0;
  }
  const std::string json = input::to_json(doc->root).dump();
  fuzz::require_round_trip(
      json, [](const input::Document& d) { return Result<nlohmann::ordered_json>(input::to_json(d.root)); },
      [](const nlohmann::ordered_json& j) { return j.dump(); }, "input::to_json's text reads back to the same JSON");
  return 0;
}
