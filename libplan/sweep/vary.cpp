#include "sweep/vary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>

namespace het::sweep {

namespace {

Diagnostic option_error(const std::string& message) { return Diagnostic{"", 0, 0, "--vary", message}; }

// "10Gbit/s" -> 10, "Gbit/s"; false when it does not start with a number.
bool split_number(const std::string& text, double& number, std::string& unit, bool& whole) {
  static const std::regex re(R"(^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(.*?)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re)) return false;
  number = std::stod(m[1].str());
  unit = m[2].str();
  whole = m[1].str().find_first_of(".eE") == std::string::npos;
  return true;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// A path's steps: a key, or a list entry by index or by name.
struct Step {
  std::string key;    // empty for a list step
  std::string entry;  // a list step's index or name
};

Result<std::vector<Step>> steps_of(const std::string& path) {
  std::vector<Step> steps;
  std::size_t i = 0;
  auto bad = [&](const std::string& why) { return option_error("'" + path + "': " + why); };
  while (i < path.size()) {
    if (path[i] == '[') {
      const std::size_t close = path.find(']', i);
      if (close == std::string::npos || close == i + 1) return bad("expected [INDEX] or [NAME]");
      steps.push_back({"", path.substr(i + 1, close - i - 1)});
      i = close + 1;
      if (i < path.size() && path[i] == '.') ++i;
      continue;
    }
    const std::size_t end = path.find_first_of(".[", i);
    const std::string key = path.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (key.empty()) return bad("an empty field name");
    steps.push_back({key, ""});
    i = end == std::string::npos ? path.size() : end;
    if (i < path.size() && path[i] == '.') {
      ++i;
      if (i == path.size()) return bad("ends with '.'");
    }
  }
  if (steps.empty() || steps.front().key.empty()) return bad("expected a field name first");
  if (steps.back().key.empty()) return bad("expected a field, not a list entry, last");
  return steps;
}

std::string keys_of(const YAML::Node& map) {
  std::string out;
  for (const auto& kv : map) out += (out.empty() ? "" : ", ") + kv.first.as<std::string>();
  return out;
}

// `doc` without the subcluster `name` and the links that name it (a sweep's `nodes` of 0).
YAML::Node without_subcluster(YAML::Node doc, const std::string& name) {
  auto named = [&](const YAML::Node& n) { return n.IsScalar() && n.as<std::string>() == name; };
  YAML::Node subclusters(YAML::NodeType::Sequence), links(YAML::NodeType::Sequence);
  for (const auto& sc : doc["subclusters"])
    if (!(sc.IsMap() && sc["name"] && named(sc["name"]))) subclusters.push_back(sc);
  doc["subclusters"] = subclusters;
  if (doc["links"] && doc["links"].IsSequence()) {
    for (const auto& l : doc["links"]) {
      const bool between = l.IsMap() && l["between"] && l["between"].IsSequence() &&
                           std::any_of(l["between"].begin(), l["between"].end(), named);
      if (!between) links.push_back(l);
    }
    doc["links"] = links;
  }
  return doc;
}

}  // namespace

Result<Vary> parse_vary(const std::string& text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return option_error("'" + text + "': expected PATH=V1,V2,... or PATH=LO..HI[/N] (e.g. links[0].bandwidth=1Gbit/s..100Gbit/s/8)");
  Vary v;
  v.path = text.substr(0, eq);
  for (auto [prefix, target] : {std::pair{"model.", Target::model}, std::pair{"cluster.", Target::cluster}})
    if (v.path.rfind(prefix, 0) == 0) v.path.erase(0, std::string(prefix).size()), v.target = target;
  if (auto s = steps_of(v.path); !s) return s.errors();
  const std::string rhs = text.substr(eq + 1);
  const std::size_t dots = rhs.find("..");
  if (dots == std::string::npos) {  // a list
    std::size_t at = 0;
    while (at <= rhs.size()) {
      const std::size_t comma = rhs.find(',', at);
      const std::string value = rhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (value.find_first_not_of(" \t") == std::string::npos) return option_error("'" + text + "': an empty value");
      v.values.push_back(value);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    double x;
    std::string unit;
    bool whole;
    for (std::size_t k = 0; k < v.values.size(); ++k) {
      if (!split_number(v.values[k], x, unit, whole) || (k > 0 && unit != v.unit)) {
        v.numbers.clear(), v.unit.clear();
        break;
      }
      v.numbers.push_back(x), v.unit = unit;
    }
    return v;
  }
  // A range: LO..HI[/N].
  std::string lo_text = rhs.substr(0, dots), hi_text = rhs.substr(dots + 2);
  int n = 0;
  static const std::regex count_re(R"(^(.*)/([0-9]+)$)");
  std::smatch m;
  if (std::regex_match(hi_text, m, count_re)) {
    n = std::stoi(m[2].str().substr(0, 6));
    hi_text = m[1].str();
    if (n < 2 || n > 1000) return option_error("'" + text + "': a range has 2 to 1000 points (/N), not " + m[2].str());
  }
  double lo, hi;
  std::string lo_unit, hi_unit;
  bool lo_whole, hi_whole;
  if (!split_number(lo_text, lo, lo_unit, lo_whole) || !split_number(hi_text, hi, hi_unit, hi_whole))
    return option_error("'" + text + "': a range's ends are numbers (with a unit), as in 1Gbit/s..100Gbit/s/8");
  if (lo_unit != hi_unit)
    return option_error("'" + text + "': the range's ends have different units ('" + lo_unit + "', '" + hi_unit + "')");
  if (!(hi > lo)) return option_error("'" + text + "': the range's high end must be above its low end");
  const bool whole = lo_whole && hi_whole;
  v.unit = lo_unit;
  v.ratio = lo > 0 && hi / lo >= 10;
  if (n == 0) n = whole && !v.ratio && hi - lo <= 32 ? static_cast<int>(hi - lo) + 1 : 8;
  for (int k = 0; k < n; ++k) {
    const double f = double(k) / (n - 1);
    double x = v.ratio ? lo * std::pow(hi / lo, f) : lo + (hi - lo) * f;
    if (k == n - 1) x = hi;
    if (whole && !v.ratio) {
      if (std::fabs(x - std::round(x)) > 1e-9)
        return option_error("'" + text + "': " + std::to_string(n) + " evenly spaced points from " + format_number(lo) + " to " +
                            format_number(hi) + " are not whole numbers (" + format_number(x) +
                            "); choose /N so that they are, or list the values");
      x = std::round(x);
    }
    v.numbers.push_back(x);
    v.values.push_back(format_number(x) + v.unit);
  }
  return v;
}

Result<Target> target_of(const Vary& vary, const YAML::Node* model_root, const YAML::Node& cluster_root) {
  if (vary.target) {
    if (*vary.target == Target::model && !model_root)
      return option_error("'" + vary.path + "': the model is not a YAML document (a Hugging Face config); give it as a model YAML to vary it");
    return *vary.target;
  }
  const std::string first = steps_of(vary.path)->front().key;
  const bool in_model = model_root && (*model_root)[first], in_cluster = bool(cluster_root[first]);
  if (in_model && in_cluster)
    return option_error("'" + vary.path + "': both the model and the cluster have '" + first + "'; write model." + vary.path +
                        " or cluster." + vary.path);
  if (in_model) return Target::model;
  if (in_cluster) return Target::cluster;
  return option_error("'" + vary.path + "': neither the model nor the cluster has a field '" + first + "' (model: " +
                      (model_root ? keys_of(*model_root) : std::string("a Hugging Face config")) +
                      "; cluster: " + keys_of(cluster_root) + ")");
}

Result<YAML::Node> apply(const YAML::Node& root, const std::string& file, const std::string& path, const std::string& value) {
  auto steps = steps_of(path);
  if (!steps) return steps.errors();
  YAML::Node doc = YAML::Clone(root);
  YAML::Node at = doc;
  std::string where;       // the path walked so far
  std::string subcluster;  // the subcluster entry `at` is, when it is one
  auto error = [&](const YAML::Node& node, const std::string& message) {
    const YAML::Mark mark = node.Mark();
    return Diagnostic{file, mark.is_null() ? 0 : mark.line + 1, mark.is_null() ? 0 : mark.column + 1, where, message};
  };
  auto has_key = [&](const std::string& key) -> Result<Done> {
    if (!at.IsMap()) return error(at, "is not a map, so it has no field '" + key + "'");
    if (!at[key]) return error(at, "has no field '" + key + "' (it has: " + keys_of(at) + ")");
    return Done{};
  };
  for (std::size_t i = 0; i + 1 < steps->size(); ++i) {  // to the field's map (a path ends with a key)
    const Step& s = (*steps)[i];
    if (!s.key.empty()) {
      if (auto ok = has_key(s.key); !ok) return ok.errors();
      at.reset(at[s.key]);
      where += (where.empty() ? "" : ".") + s.key;
      subcluster.clear();
      continue;
    }
    if (!at.IsSequence()) return error(at, "is not a list, so it has no entry [" + s.entry + "]");
    YAML::Node found;
    if (s.entry.find_first_not_of("0123456789") == std::string::npos) {
      const std::size_t k = std::stoul(s.entry.substr(0, 9));
      if (k >= at.size()) return error(at, "has " + std::to_string(at.size()) + " entries; there is no [" + s.entry + "]");
      found.reset(at[k]);
    } else {
      std::string names;
      bool has = false;
      for (const auto& e : at) {
        if (!(e.IsMap() && e["name"] && e["name"].IsScalar())) continue;
        names += (names.empty() ? "" : ", ") + e["name"].as<std::string>();
        if (!has && e["name"].as<std::string>() == s.entry) found.reset(e), has = true;
      }
      if (!has) return error(at, "has no entry named '" + s.entry + "' (" + (names.empty() ? "its entries have no names" : names) + ")");
    }
    if (where == "subclusters" && found.IsMap() && found["name"] && found["name"].IsScalar())
      subcluster = found["name"].as<std::string>();
    where += "[" + s.entry + "]";
    at.reset(found);
  }
  const std::string& key = steps->back().key;
  if (auto ok = has_key(key); !ok) return ok.errors();
  double x;
  std::string unit;
  bool whole;
  if (key == "nodes" && !subcluster.empty() && split_number(value, x, unit, whole) && unit.empty() && x == 0)
    return without_subcluster(doc, subcluster);
  at[key] = value;
  return doc;
}

}  // namespace het::sweep
