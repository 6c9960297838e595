#pragma once
// JSON text for people and for diffs: a container whose one-line form fits in `width`
// characters stays on one line (`"layers": [0, 16]`, `{"node": 0, "device": 3}`), larger
// ones are expanded one element per line. The text parses to the same JSON.
#include <string>

#include <nlohmann/json.hpp>

namespace het {

std::string to_text(const nlohmann::ordered_json& value, int width = 100);

}  // namespace het
