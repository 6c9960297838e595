#include "importer/importer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "units/units.hpp"

namespace het::importer {

namespace fs = std::filesystem;

std::string device_name(const std::string& peer) {
  static const std::map<std::string, std::string> names = {
      {"A100-40", "A100-40GB"}, {"A100-80", "A100-80GB"}, {"V100-16", "V100-16GB"},
      {"V100-32", "V100-32GB"}, {"GH-96", "GH200-96GB"},  {"RTX-3090", "RTX-3090"}};
  auto it = names.find(peer);
  return it == names.end() ? peer : it->second;
}

namespace {

Result<nlohmann::json> read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return Diagnostic{file.string(), 0, 0, "", "cannot open the file"};
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return Diagnostic{file.string(), 0, 0, "", std::string("not valid JSON: ") + e.what()};
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

ProfileSpec empty_profile(const Options& o) {
  ProfileSpec p;
  p.device = o.device.value_or(device_name(fs::path(o.dir).lexically_normal().filename().string()));
  if (p.device.empty()) p.device = device_name(fs::path(o.dir).lexically_normal().parent_path().filename().string());
  p.model = profile_model(o.model);
  return p;
}

Result<ProfileSpec> import_sailor(const Options& o) {
  const fs::path file = fs::path(o.dir) / "profile.json";
  auto doc = read_json(file);
  if (!doc) return doc.errors();
  nlohmann::json info;
  std::string model_key;
  if (o.llm_info) {
    auto i = read_json(*o.llm_info);
    if (!i) return i.errors();
    // The model's key in llm_info.json is the directory above the GPU's (e.g. OPT-350).
    model_key = fs::path(o.dir).lexically_normal().parent_path().filename().string();
    if (!i->contains(model_key))
      return Diagnostic{*o.llm_info, 0, 0, "", "has no entry for model '" + model_key + "'"};
    info = (*i)[model_key];
  }
  ProfileSpec p = empty_profile(o);
  std::vector<double> updates;
  try {
    for (const auto& [mbs_text, by_tp] : doc->items()) {
      const int mbs = std::stoi(mbs_text);
      for (const auto& [tp_text, layers] : by_tp.items()) {
        const int tp = std::stoi(tp_text);
        const int n = static_cast<int>(layers.size());
        if (n < 3) return Diagnostic{file.string(), 0, 0, mbs_text + "." + tp_text, "expected embedding, blocks and head"};
        auto row = [&](UnitKind kind, double f, double b, int layer_index) {
          ProfileRow r;
          r.unit = kind;
          r.tp = tp;
          r.micro_batch_size = mbs;
          r.seq_length = o.model.seq_length;
          r.forward = f;
          r.backward = b;
          if (!info.is_null() && info.contains(tp_text) && info[tp_text].contains(std::to_string(layer_index))) {
            const auto& li = info[tp_text][std::to_string(layer_index)];
            const double bytes = dtype_bytes(o.model.dtype);
            r.parameter_memory = li.at("params_floats").get<double>() * bytes;
            r.activation_memory = li.at("act_mem_floats").get<double>() * bytes * mbs;
          }
          p.units.push_back(r);
        };
        std::vector<double> f, b;
        for (int k = 1; k < n - 1; ++k) {
          const auto& v = layers.at(std::to_string(k));
          f.push_back(v.at(0).get<double>());
          b.push_back(v.at(1).get<double>());
          updates.push_back(v.at(2).get<double>());
        }
        const auto& e = layers.at("0");
        const auto& h = layers.at(std::to_string(n - 1));
        row(UnitKind::embedding, e.at(0).get<double>(), e.at(1).get<double>(), 0);
        row(UnitKind::layer, median(f), median(b), 1);
        row(UnitKind::head, h.at(0).get<double>(), h.at(1).get<double>(), n - 1);
      }
    }
  } catch (const std::exception& e) {
    return Diagnostic{file.string(), 0, 0, "", std::string("not a Sailor profile: ") + e.what()};
  }
  if (!updates.empty()) p.optimizer_step = median(updates);
  return p;
}

Result<ProfileSpec> import_metis(const Options& o) {
  ProfileSpec p = empty_profile(o);
  const std::regex name(R"(mbs(\d+)_tmp(\d+)\.json)");
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o.dir, ec)) files.push_back(e.path());
  if (ec) return Diagnostic{o.dir, 0, 0, "", "cannot list the directory: " + ec.message()};
  std::sort(files.begin(), files.end());
  std::vector<double> opt;
  for (const auto& file : files) {
    std::smatch m;
    const std::string base = file.filename().string();
    if (!std::regex_match(base, m, name)) continue;
    auto doc = read_json(file);
    if (!doc) return doc.errors();
    try {
      const int mbs = std::stoi(m[1]), tp = std::stoi(m[2]);
      const auto& times = doc->at("execution_time").at("layer_compute_total_ms");
      const int n = static_cast<int>(times.size());
      std::vector<double> blocks;
      for (int k = 1; k < n - 1; ++k) blocks.push_back(times.at(k).get<double>() * 1e-3);
      auto row = [&](UnitKind kind, double total) {
        ProfileRow r;
        r.unit = kind;
        r.tp = tp;
        r.micro_batch_size = mbs;
        r.seq_length = o.model.seq_length;
        r.forward = total / 3;
        r.backward = 2 * total / 3;
        p.units.push_back(r);
      };
      row(UnitKind::embedding, times.at(0).get<double>() * 1e-3);
      row(UnitKind::layer, median(blocks));
      row(UnitKind::head, times.at(n - 1).get<double>() * 1e-3);
      opt.push_back(doc->at("execution_time").at("optimizer_time_ms").get<double>() * 1e-3 / n);
    } catch (const std::exception& e) {
      return Diagnostic{file.string(), 0, 0, "", std::string("not a Metis profile: ") + e.what()};
    }
  }
  if (p.units.empty()) return Diagnostic{o.dir, 0, 0, "", "no mbs<b>_tmp<t>.json files"};
  p.optimizer_step = median(opt);
  return p;
}

std::string q(double v, units::Dimension d) { return units::format(v, d); }

}  // namespace

Result<ProfileSpec> import_profile(const Options& o) {
  if (o.format == "sailor") return import_sailor(o);
  if (o.format == "metis") return import_metis(o);
  return Diagnostic{"", 0, 0, "--from", "expected sailor or metis, got '" + o.format + "'"};
}

std::string to_yaml(const ProfileSpec& p, const std::string& header) {
  using units::Dimension;
  std::ostringstream out;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  out << "format: hetplan.profile/v1\n";
  out << "device: " << p.device << "\n";
  out << "model: {architecture: " << to_string(p.model.architecture) << ", hidden_size: " << p.model.hidden_size
      << ", num_attention_heads: " << p.model.num_attention_heads << ", seq_length: " << p.model.seq_length;
  if (p.model.num_kv_heads) out << ", num_kv_heads: " << *p.model.num_kv_heads;
  if (p.model.ffn_hidden_size) out << ", ffn_hidden_size: " << *p.model.ffn_hidden_size;
  if (p.model.vocab_size) out << ", vocab_size: " << *p.model.vocab_size;
  out << "}\n";
  out << "units:\n";
  auto rows = p.units;
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return std::tie(a.unit, a.tp, a.cp, a.micro_batch_size) < std::tie(b.unit, b.tp, b.cp, b.micro_batch_size);
  });
  for (const auto& r : rows) {
    out << "  - {unit: " << to_string(r.unit) << ", tp: " << r.tp << ", cp: " << r.cp
        << ", micro_batch_size: " << r.micro_batch_size << ", seq_length: " << r.seq_length
        << ", forward: " << q(r.forward, Dimension::time) << ", backward: " << q(r.backward, Dimension::time);
    if (r.recompute) out << ", recompute: " << q(*r.recompute, Dimension::time);
    if (r.activation_memory) out << ", activation_memory: " << q(*r.activation_memory, Dimension::bytes);
    if (r.parameter_memory) out << ", parameter_memory: " << q(*r.parameter_memory, Dimension::bytes);
    out << "}\n";
  }
  if (p.optimizer_step) out << "optimizer_step: " << q(*p.optimizer_step, Dimension::time) << "\n";
  if (!p.links.empty()) {
    out << "links:\n";
    for (const auto& [c, l] : p.links)
      out << "  " << to_string(c) << ": {bandwidth: " << q(l.bandwidth, Dimension::bandwidth)
          << ", latency: " << q(l.latency, Dimension::time) << "}\n";
  }
  return out.str();
}

}  // namespace het::importer
