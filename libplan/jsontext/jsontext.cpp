#include "jsontext/jsontext.hpp"

namespace het {

namespace {

// One line with a space after ':' and ','.
std::string one_line(const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    if (v.empty()) return "{}";
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > 1) out += ", ";
      out += nlohmann::ordered_json(it.key()).dump();
      out += ": ";
      out += one_line(it.value());
    }
    return out + "}";
  }
  if (v.is_array()) {
    if (v.empty()) return "[]";
    std::string out = "[";
    for (const auto& e : v) {
      if (out.size() > 1) out += ", ";
      out += one_line(e);
    }
    return out + "]";
  }
  return v.dump();
}

void write(const nlohmann::ordered_json& v, int indent, int used, int width, std::string& out) {
  std::string line = one_line(v);
  if (!v.is_structured() || v.empty() || used + static_cast<int>(line.size()) <= width) {
    out += line;
    return;
  }
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  bool first = true;
  out += v.is_object() ? "{\n" : "[\n";
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += pad;
    int at = indent + 2;
    if (v.is_object()) {
      std::string key = nlohmann::ordered_json(it.key()).dump();
      key += ": ";
      out += key;
      at += static_cast<int>(key.size());
    }
    write(it.value(), indent + 2, at, width, out);
  }
  out += '\n';
  out.append(static_cast<std::size_t>(indent), ' ');
  out += v.is_object() ? '}' : ']';
}

}  // namespace

std::string to_text(const nlohmann::ordered_json& value, int width) {
  std::string out;
  write(value, 0, 0, width, out);
  return out + "\n";
}

}  // namespace het
