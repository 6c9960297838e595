#include "importer/importer.hpp"

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include <nlohmann/json.hpp>

#include "input/input.hpp"
#include "spec/limits.hpp"

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

// How Sailor wrote the Metis files (eth-easl/sailor, generate_profile_Metis and
// layer_mem_cost of its baseline-profile generator): every value takes 4 bytes
// (parameters_per_layer_bytes = llm_info's params_bytes = 4 × params_floats; activations at
// its --fp_size, default 4), a parameter's model state 20 bytes (Adam's two states 8, an fp32
// model copy 4, its gradient 4, a communication buffer 4), and MB is 2^20 bytes. All three
// hold to the byte in every OPT-350 A100-40 and V100-16 file of the peer data.
constexpr double kMetisBytesPerValue = 4;
constexpr double kMetisStateBytesPerParameter = 20;
constexpr double kMetisMB = 1 << 20;

const char* kMetisSplit =
    "backward = 2 x forward: the Metis files give forward + backward only (execution_time.layer_compute_total_ms); "
    "1:2 is the analytic model's split";

Result<nlohmann::json> read_json(const fs::path& file) {
  auto text = input::read_file(file.string());
  if (!text) return text.errors();
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Diagnostic{file.string(), 0, 0, "", std::string("not valid JSON: ") + e.what()};
  }
}

// A key or file-name part that counts (a tp, a micro-batch size): digits only, from 1 to the
// limit the profile reader holds it to — the profile written must read back. nullopt otherwise
// (std::stoi would take "0", "-2" and "4x").
std::optional<int> count_of(const std::string& text, const input::Limit& limit) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const int n = std::stoi(text);
  if (n < 1 || n > limit.max) return std::nullopt;
  return n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// DIR without a trailing separator: .../MODEL/GPU.
fs::path directory(const Options& o) {
  fs::path d = fs::path(o.dir).lexically_normal();
  return d.filename().empty() ? d.parent_path() : d;
}

// The profiled model's name in the peer data (the directory above the GPU's, e.g. OPT-350).
std::string peer_model(const Options& o) { return directory(o).parent_path().filename().string(); }

// The peer data's misc/ (peer-data/sailor/README.md: sailor_planner/profiles/MODEL/GPU and
// baselines/Metis/profiles/MODEL/GPU), when DIR lies in that tree.
std::optional<fs::path> misc_dir(const Options& o) {
  fs::path root = fs::absolute(directory(o));
  for (int k = 0; k < (o.format == "sailor" ? 4 : 5); ++k) root = root.parent_path();
  std::error_code ec;
  if (!fs::is_directory(root / "misc", ec)) return std::nullopt;
  return root / "misc";
}

// Every dimension of the model that the peer data contradicts (see the header).
Result<Done> check_model(const Options& o, const std::optional<fs::path>& misc, const nlohmann::json& info,
                         const std::optional<fs::path>& info_file) {
  const std::string name = peer_model(o);
  const ModelSpec& m = o.model;
  Diagnostics out;
  bool configured = false;
  if (misc) {
    std::vector<fs::path> configs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(*misc, ec))
      if (e.path().filename().string().rfind("training_config_", 0) == 0 && e.path().extension() == ".json")
        configs.push_back(e.path());
    std::sort(configs.begin(), configs.end());
    for (const auto& file : configs) {
      auto doc = read_json(file);
      if (!doc) return doc.errors();
      if (!doc->is_object() || !doc->contains("model") || (*doc)["model"] != name) continue;
      configured = true;
      for (auto [field, key, have] : {std::tuple{"hidden_size", "hidden_size", m.hidden_size},
                                      std::tuple{"num_attention_heads", "heads", m.num_attention_heads},
                                      std::tuple{"seq_length", "sequence_length", m.seq_length},
                                      std::tuple{"vocab_size", "vocab_size", m.vocab_size}}) {
        if (!doc->contains(key) || !(*doc)[key].is_number_integer()) continue;
        const long said = (*doc)[key].get<long>();
        if (said != have)
          out.push_back({o.model_file, 0, 0, field,
                         "contradicts the peer data: " + name + " was profiled with " + field + " " +
                             std::to_string(said) + " (" + file.string() + ": \"" + key + "\"), the model has " +
                             std::to_string(have)});
      }
    }
  }
  // Without a training config: one sequence's output values of a block at tp 1.
  if (!configured && info.contains(name) && info[name].contains("1") && info[name]["1"].contains("1") &&
      info[name]["1"]["1"].contains("act_output_floats") && info[name]["1"]["1"]["act_output_floats"].is_number()) {
    const double said = info[name]["1"]["1"]["act_output_floats"].get<double>();
    const double have = double(m.seq_length) * m.hidden_size;
    if (said != have)
      out.push_back({o.model_file, 0, 0, "hidden_size",
                     "contradicts the peer data: " + name + "'s blocks pass on " + std::to_string(long(said)) +
                         " values a sequence (" + info_file->string() +
                         ": tp 1, layer 1, act_output_floats = seq_length x hidden_size), the model " +
                         std::to_string(m.seq_length) + " x " + std::to_string(m.hidden_size) + " = " +
                         std::to_string(long(have))});
  }
  if (!out.empty()) return out;
  return Done{};
}

ProfileSpec empty_profile(const Options& o) {
  ProfileSpec p;
  p.device = o.device.value_or(device_name(directory(o).filename().string()));
  p.model = profile_model(o.model);
  return p;
}

// `memory`: the model's entry of llm_info.json (value counts per tp and layer), or null.
Result<ProfileSpec> import_sailor(const Options& o, const nlohmann::json& memory) {
  const fs::path file = directory(o) / "profile.json";
  auto doc = read_json(file);
  if (!doc) return doc.errors();
  ProfileSpec p = empty_profile(o);
  const double bytes = dtype_bytes(o.model.dtype);
  try {
    for (const auto& [mbs_text, by_tp] : doc->items()) {
      const auto mbs_count = count_of(mbs_text, limits::kGlobalBatchSize);
      if (!mbs_count)
        return Diagnostic{file.string(), 0, 0, mbs_text,
                          "expected a micro-batch size from 1 to " + std::to_string(limits::kGlobalBatchSize.max) + " as the key"};
      const int mbs = *mbs_count;
      for (const auto& by_tp_entry : by_tp.items()) {
        // Named, not a structured binding: the row lambda captures it (clang before 16 cannot).
        const std::string& tp_text = by_tp_entry.key();
        const auto& layers = by_tp_entry.value();
        const auto tp_count = count_of(tp_text, limits::kAttentionHeads);
        if (!tp_count)
          return Diagnostic{file.string(), 0, 0, mbs_text + "." + tp_text,
                            "expected a tensor-parallel degree from 1 to " + std::to_string(limits::kAttentionHeads.max) + " as the key"};
        const int tp = *tp_count;
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
          const std::string layer = std::to_string(layer_index);
          if (!memory.is_null() && memory.contains(tp_text) && memory[tp_text].contains(layer)) {
            const auto& li = memory[tp_text][layer];
            const double params = li.at("params_floats").get<double>(), acts = li.at("act_mem_floats").get<double>();
            // A count: the profile written must read back (found by fuzzing: -12911616 floats).
            if (!(params >= 0 && acts >= 0 && std::isfinite(params) && std::isfinite(acts)))
              throw std::invalid_argument("llm_info's params_floats and act_mem_floats of tp " + tp_text + ", layer " + layer +
                                          " must be non-negative counts");
            r.parameter_memory = params * bytes;
            r.activation_memory = acts * bytes * mbs;
          }
          p.units.push_back(r);
        };
        std::vector<double> f, b, updates;
        for (int k = 0; k < n; ++k) {
          const auto& v = layers.at(std::to_string(k));
          updates.push_back(v.at(2).get<double>());
          if (k > 0 && k < n - 1) f.push_back(v.at(0).get<double>()), b.push_back(v.at(1).get<double>());
        }
        const auto& e = layers.at("0");
        const auto& h = layers.at(std::to_string(n - 1));
        row(UnitKind::embedding, e.at(0).get<double>(), e.at(1).get<double>(), 0);
        row(UnitKind::layer, median(f), median(b), 1);
        row(UnitKind::head, h.at(0).get<double>(), h.at(1).get<double>(), n - 1);
        // All 0 is no measurement (e.g. every update time of OPT-350 on A100-80): no row.
        if (median(updates) > 0) p.optimizer_step.push_back({tp, mbs, median(updates)});
      }
    }
  } catch (const std::exception& e) {
    return Diagnostic{file.string(), 0, 0, "", std::string("not a Sailor profile: ") + e.what()};
  }
  // A profile without rows does not read back (found by fuzzing: `{}`, or micro-batch sizes
  // with no tp under them).
  if (p.units.empty())
    return Diagnostic{file.string(), 0, 0, "",
                      "no measurements: expected {\"<micro-batch size>\": {\"<tp>\": {\"0\": [forward, backward, update], ...}}}"};
  return p;
}

// A count read as a double, as text (found by fuzzing: 5e34 converted to long is undefined).
std::string count_text(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}

Result<ProfileSpec> import_metis(const Options& o) {
  ProfileSpec p = empty_profile(o);
  const double to_model = dtype_bytes(o.model.dtype) / kMetisBytesPerValue;  // the files' bytes -> the model's
  const std::regex name(R"(mbs(\d+)_tmp(\d+)\.json)");
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(directory(o), ec)) files.push_back(e.path());
  if (ec) return Diagnostic{o.dir, 0, 0, "", "cannot list the directory: " + ec.message()};
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::smatch m;
    const std::string base = file.filename().string();
    if (!std::regex_match(base, m, name)) continue;
    auto doc = read_json(file);
    if (!doc) return doc.errors();
    try {
      const auto mbs_count = count_of(m[1], limits::kGlobalBatchSize), tp_count = count_of(m[2], limits::kAttentionHeads);
      if (!mbs_count || !tp_count)
        return Diagnostic{file.string(), 0, 0, "",
                          "expected mbs<b>_tmp<t>.json with b from 1 to " + std::to_string(limits::kGlobalBatchSize.max) + " and t from 1 to " +
                              std::to_string(limits::kAttentionHeads.max)};
      const int mbs = *mbs_count, tp = *tp_count;
      const auto& time = doc->at("execution_time");
      const auto& times = time.at("layer_compute_total_ms");
      const auto& memory = doc->at("execution_memory").at("layer_memory_total_mb");
      const auto& params = doc->at("model").at("parameters").at("parameters_per_layer_bytes");
      const std::size_t n = times.size();
      if (n < 3 || memory.size() != n || params.size() != n)
        return Diagnostic{file.string(), 0, 0, "",
                          "expected one value per layer (embedding, blocks, head) in layer_compute_total_ms, "
                          "layer_memory_total_mb and parameters_per_layer_bytes"};
      struct Layer {
        double seconds, parameter_bytes, activation_bytes;  // at the model's dtype
      };
      std::vector<Layer> layers;
      for (std::size_t k = 0; k < n; ++k) {
        const double par = params.at(k).get<double>();
        const double act = memory.at(k).get<double>() * kMetisMB - kMetisStateBytesPerParameter / kMetisBytesPerValue * par;
        if (act < -0.5)
          return Diagnostic{file.string(), 0, 0, "execution_memory.layer_memory_total_mb[" + std::to_string(k) + "]",
                            "holds less than the 20 bytes a parameter of model state that Sailor's Metis files count "
                            "(parameters_per_layer_bytes[" + std::to_string(k) + "] = " + count_text(par) + ")"};
        layers.push_back({times.at(k).get<double>() * 1e-3, par * to_model, std::max(0.0, act) * to_model});
      }
      auto row = [&](UnitKind kind, const Layer& l) {
        ProfileRow r;
        r.unit = kind;
        r.tp = tp;
        r.micro_batch_size = mbs;
        r.seq_length = o.model.seq_length;
        r.forward = l.seconds / 3;
        r.backward = 2 * l.seconds / 3;
        r.parameter_memory = l.parameter_bytes;
        r.activation_memory = l.activation_bytes;
        p.units.push_back(r);
      };
      auto blocks = [&](double Layer::*field) {
        std::vector<double> v;
        for (std::size_t k = 1; k + 1 < n; ++k) v.push_back(layers[k].*field);
        return median(v);
      };
      row(UnitKind::embedding, layers.front());
      row(UnitKind::layer, {blocks(&Layer::seconds), blocks(&Layer::parameter_bytes), blocks(&Layer::activation_bytes)});
      row(UnitKind::head, layers.back());
      if (const double step = time.at("optimizer_time_ms").get<double>() * 1e-3 / double(n); step > 0)
        p.optimizer_step.push_back({tp, mbs, step});
    } catch (const std::exception& e) {
      return Diagnostic{file.string(), 0, 0, "", std::string("not a Metis profile: ") + e.what()};
    }
  }
  if (p.units.empty()) return Diagnostic{o.dir, 0, 0, "", "no mbs<b>_tmp<t>.json files"};
  p.assumptions.push_back(kMetisSplit);
  return p;
}

}  // namespace

Result<ProfileSpec> import_profile(const Options& o) {
  if (o.format != "sailor" && o.format != "metis")
    return Diagnostic{"", 0, 0, "--from", "expected sailor or metis, got '" + o.format + "'"};
  if (o.format == "metis" && o.llm_info)
    return Diagnostic{"", 0, 0, "--llm-info",
                      "not used with --from metis: the Metis files carry their own memory (parameters_per_layer_bytes, "
                      "layer_memory_total_mb, which Sailor computed from llm_info.json); give it with --from sailor"};
  const auto misc = misc_dir(o);
  std::optional<fs::path> info_file;
  std::error_code ec;
  if (o.llm_info) info_file = *o.llm_info;
  else if (misc && fs::is_regular_file(*misc / "llm_info.json", ec)) info_file = *misc / "llm_info.json";
  nlohmann::json info;
  if (info_file) {
    auto i = read_json(*info_file);
    if (!i) return i.errors();
    info = std::move(*i);
  }
  if (auto checked = check_model(o, misc, info, info_file); !checked) return checked.errors();
  if (o.format == "metis") return import_metis(o);
  nlohmann::json memory;  // only from an llm_info.json the user gave
  if (o.llm_info) {
    if (!info.contains(peer_model(o)))
      return Diagnostic{*o.llm_info, 0, 0, "", "has no entry for model '" + peer_model(o) + "'"};
    memory = info[peer_model(o)];
  }
  return import_sailor(o, memory);
}

}  // namespace het::importer
