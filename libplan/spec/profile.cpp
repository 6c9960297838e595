#include "spec/profile.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "spec/limits.hpp"

namespace het {

using input::Need;
using units::Dimension;

const char* to_string(UnitKind u) {
  switch (u) {
    case UnitKind::embedding: return "embedding";
    case UnitKind::layer: return "layer";
    case UnitKind::attn: return "attn";
    case UnitKind::mlp: return "mlp";
    case UnitKind::head: return "head";
  }
  return "?";
}

const char* to_string(LinkClass c) {
  switch (c) {
    case LinkClass::intra_node: return "intra_node";
    case LinkClass::inter_node: return "inter_node";
    case LinkClass::cross_subcluster: return "cross_subcluster";
  }
  return "?";
}

ProfileModel profile_model(const ModelSpec& m) {
  return {m.architecture, m.hidden_size, m.num_attention_heads, m.seq_length,
          m.num_kv_heads, m.ffn_hidden_size, m.vocab_size};
}

namespace {

void read_optimizer_step(const input::Fields& top, ProfileSpec& p) {
  const YAML::Node node = top.get("optimizer_step");
  if (!node.IsDefined() || node.IsNull()) return;
  if (node.IsMap()) {
    top.error("optimizer_step", "expected a time like 1.5ms or a list of {tp, [micro_batch_size,] time}, got " +
                                    input::describe(node));
    return;
  }
  if (!node.IsSequence()) {  // the single time of every tp
    if (auto t = top.quantity("optimizer_step", Dimension::time, Need::optional, true))
      p.optimizer_step.push_back({std::nullopt, std::nullopt, *t});
    return;
  }
  const input::Context& ctx = top.context();
  std::map<std::pair<int, int>, int> seen;  // (tp, micro-batch or 0) -> line
  if (static_cast<std::int64_t>(node.size()) > limits::kProfileRows.max) {
    top.error("optimizer_step", "expected at most " + std::to_string(limits::kProfileRows.max) + " entries (the limit on " +
                                    limits::kProfileRows.what + "), got " + std::to_string(node.size()));
    return;
  }
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string path = input::index("optimizer_step", i);
    input::Fields f(ctx, node[i], path, {"tp", "micro_batch_size", "time"});
    if (!f.is_map()) continue;
    OptimizerStep s;
    s.tp = static_cast<int>(f.integer("tp", Need::required, 1, limits::kAttentionHeads).value_or(1));
    if (f.has("micro_batch_size"))
      s.micro_batch_size = static_cast<int>(f.integer("micro_batch_size", Need::required, 1, limits::kGlobalBatchSize).value_or(1));
    s.time = f.quantity("time", Dimension::time, Need::required, true).value_or(0);
    if (auto [it, fresh] = seen.emplace(std::pair{*s.tp, s.micro_batch_size.value_or(0)}, f.line()); !fresh)
      ctx.error(node[i], path,
                "an optimizer step with tp " + std::to_string(*s.tp) +
                    (s.micro_batch_size ? " and micro_batch_size " + std::to_string(*s.micro_batch_size) : "") +
                    " is already given at line " + std::to_string(it->second));
    p.optimizer_step.push_back(s);
  }
}

// A YAML double-quoted scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Result<ProfileSpec> read_profile(const input::Document& doc) {
  Diagnostics errors;
  input::Context ctx{doc.file, &errors};
  input::Fields top(ctx, doc.root, "",
                    {"format", "device", "model", "units", "optimizer_step", "assumptions", "links", "collectives", "transport"});
  if (!top.is_map()) return errors;
  if (auto format = top.string("format", Need::required); format && *format != "hetplan.profile/v1")
    top.error("format", "expected hetplan.profile/v1, got '" + *format + "'");
  ProfileSpec p;
  p.file = doc.file;
  p.device = top.string("device", Need::required).value_or("");
  if (auto m = top.map("model", Need::required,
                       {"architecture", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
                        "seq_length", "vocab_size"})) {
    p.model_line = m->line();
    p.model.architecture = m->choice<Architecture>("architecture", Need::required,
                                                   {{"gpt", Architecture::gpt}, {"llama", Architecture::llama}})
                               .value_or(Architecture::gpt);
    p.model.hidden_size = static_cast<int>(m->integer("hidden_size", Need::required, 1, limits::kHiddenSize).value_or(0));
    p.model.num_attention_heads =
        static_cast<int>(m->integer("num_attention_heads", Need::required, 1, limits::kAttentionHeads).value_or(0));
    p.model.seq_length = static_cast<int>(m->integer("seq_length", Need::required, 1, limits::kSeqLength).value_or(0));
    for (auto [key, field, limit] : {std::tuple{"num_kv_heads", &p.model.num_kv_heads, limits::kAttentionHeads},
                                     std::tuple{"ffn_hidden_size", &p.model.ffn_hidden_size, limits::kFfnHiddenSize},
                                     std::tuple{"vocab_size", &p.model.vocab_size, limits::kVocabSize}})
      if (auto v = m->integer(key, Need::optional, 1, limit)) *field = static_cast<int>(*v);
  }
  using Shape = std::tuple<UnitKind, int, int, int, int>;
  std::map<Shape, int> shapes;  // -> line of the first row with that shape
  if (auto list = top.list("units", Need::required, limits::kProfileRows)) {
    if (list->size() == 0) top.error("units", "expected at least one measured unit");
    for (std::size_t i = 0; i < list->size(); ++i) {
      input::Fields f(ctx, (*list)[i], input::index("units", i),
                      {"unit", "tp", "cp", "micro_batch_size", "seq_length", "forward", "backward", "recompute",
                       "activation_memory", "parameter_memory"});
      if (!f.is_map()) continue;
      ProfileRow r;
      r.line = f.line();
      r.unit = f.choice<UnitKind>("unit", Need::required,
                                  {{"embedding", UnitKind::embedding},
                                   {"layer", UnitKind::layer},
                                   {"attn", UnitKind::attn},
                                   {"mlp", UnitKind::mlp},
                                   {"head", UnitKind::head}})
                   .value_or(UnitKind::layer);
      r.tp = static_cast<int>(f.integer("tp", Need::optional, 1, limits::kAttentionHeads).value_or(1));
      r.cp = static_cast<int>(f.integer("cp", Need::optional, 1, limits::kSeqLength).value_or(1));
      r.micro_batch_size = static_cast<int>(f.integer("micro_batch_size", Need::required, 1, limits::kGlobalBatchSize).value_or(1));
      r.seq_length = static_cast<int>(f.integer("seq_length", Need::optional, 1, limits::kSeqLength).value_or(p.model.seq_length));
      // Zero is a measurement below the timer's resolution (e.g. an embedding's backward).
      r.forward = f.quantity("forward", Dimension::time, Need::required, true).value_or(0);
      r.backward = f.quantity("backward", Dimension::time, Need::required, true).value_or(0);
      r.recompute = f.quantity("recompute", Dimension::time, Need::optional, true);
      r.activation_memory = f.quantity("activation_memory", Dimension::bytes, Need::optional, true);
      r.parameter_memory = f.quantity("parameter_memory", Dimension::bytes, Need::optional, true);
      Shape shape{r.unit, r.tp, r.cp, r.micro_batch_size, r.seq_length};
      if (auto [it, fresh] = shapes.emplace(shape, r.line); !fresh)
        ctx.error((*list)[i], input::index("units", i),
                  std::string("a ") + to_string(r.unit) + " row with tp " + std::to_string(r.tp) + ", cp " +
                      std::to_string(r.cp) + ", micro_batch_size " + std::to_string(r.micro_batch_size) +
                      " and seq_length " + std::to_string(r.seq_length) + " is already given at line " +
                      std::to_string(it->second));
      p.units.push_back(r);
    }
  }
  read_optimizer_step(top, p);
  if (auto c = top.string("collectives", Need::optional)) {
    if (*c != "included" && *c != "excluded") top.error("collectives", "expected included or excluded, got '" + *c + "'");
    p.collectives_included = *c != "excluded";
  }
  p.transport = read_link(top, "transport", Need::optional);
  if (auto list = top.list("assumptions", Need::optional, limits::kAssumptions))
    for (std::size_t i = 0; i < list->size(); ++i)
      if (auto s = input::as_string(ctx, (*list)[i], input::index("assumptions", i))) p.assumptions.push_back(*s);
  if (auto links = top.map("links", Need::optional, {"intra_node", "inter_node", "cross_subcluster"})) {
    for (auto c : {LinkClass::intra_node, LinkClass::inter_node, LinkClass::cross_subcluster})
      if (auto l = read_link(*links, to_string(c), Need::optional)) p.links[c] = *l;
  }
  if (!errors.empty()) return errors;
  return p;
}

Result<ProfileSpec> load_profile(const std::string& file) {
  auto doc = input::load(file);
  if (!doc) return doc.errors();
  return read_profile(*doc);
}

std::string write_profile(const ProfileSpec& p, const std::string& header) { return write_profile(p, ProfileComments{header, {}, {}}); }

std::string write_profile(const ProfileSpec& p, const ProfileComments& comments) {
  auto q = [](double v, Dimension d) { return units::format(v, d); };
  // A comment after a row, on one line.
  auto after = [](const std::string& comment) {
    std::string text = comment;
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text.empty() ? std::string() : "  # " + text;
  };
  std::ostringstream out;
  std::istringstream lines(comments.header);
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  out << "format: hetplan.profile/v1\n";
  out << "device: " << p.device << "\n";
  out << "model: {architecture: " << to_string(p.model.architecture) << ", hidden_size: " << p.model.hidden_size
      << ", num_attention_heads: " << p.model.num_attention_heads;
  if (p.model.num_kv_heads) out << ", num_kv_heads: " << *p.model.num_kv_heads;
  if (p.model.ffn_hidden_size) out << ", ffn_hidden_size: " << *p.model.ffn_hidden_size;
  out << ", seq_length: " << p.model.seq_length;
  if (p.model.vocab_size) out << ", vocab_size: " << *p.model.vocab_size;
  out << "}\n";
  if (!p.collectives_included)
    out << "collectives: excluded  # one shard's compute: the TP and CP collectives are the cost model's, from the links\n";
  if (!p.assumptions.empty()) {
    out << "assumptions:\n";
    for (const auto& a : p.assumptions) out << "  - " << quoted(a) << "\n";
  }
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
    out << "}" << (comments.row ? after(comments.row(r)) : "") << "\n";
  }
  if (p.optimizer_step.size() == 1 && !p.optimizer_step[0].tp) {
    out << "optimizer_step: " << q(p.optimizer_step[0].time, Dimension::time)
        << (comments.optimizer_step ? after(comments.optimizer_step(p.optimizer_step[0])) : "") << "\n";
  } else if (!p.optimizer_step.empty()) {
    out << "optimizer_step:  # per layer's parameters on one device\n";
    auto steps = p.optimizer_step;
    std::stable_sort(steps.begin(), steps.end(), [](const OptimizerStep& a, const OptimizerStep& b) {
      return std::pair{a.tp.value_or(0), a.micro_batch_size.value_or(0)} <
             std::pair{b.tp.value_or(0), b.micro_batch_size.value_or(0)};
    });
    for (const auto& s : steps) {
      out << "  - {tp: " << s.tp.value_or(1);
      if (s.micro_batch_size) out << ", micro_batch_size: " << *s.micro_batch_size;
      out << ", time: " << q(s.time, Dimension::time) << "}" << (comments.optimizer_step ? after(comments.optimizer_step(s)) : "")
          << "\n";
    }
  }
  if (p.transport)
    out << "transport: {bandwidth: " << q(p.transport->bandwidth, Dimension::bandwidth) << ", latency: " << q(p.transport->latency, Dimension::time)
        << "}  # hetexec's TCP transport between two ranks here (loopback): added to emulated links\n";
  if (!p.links.empty()) {
    out << "links:\n";
    for (const auto& [c, l] : p.links)
      out << "  " << to_string(c) << ": {bandwidth: " << q(l.bandwidth, Dimension::bandwidth)
          << ", latency: " << q(l.latency, Dimension::time) << "}\n";
  }
  return out.str();
}

Diagnostics profile_mismatch(const ProfileSpec& p, const ModelSpec& m, const std::string& model_name) {
  Diagnostics out;
  auto differ = [&](const std::string& field, const std::string& have, const std::string& want) {
    if (have != want)
      out.push_back({p.file, p.model_line, 0, "model." + field,
                     "the profile was measured for " + field + " " + have + ", but " + model_name + " has " + want});
  };
  auto number = [&](const char* field, std::optional<int> have, int want) {
    if (have) differ(field, std::to_string(*have), std::to_string(want));
  };
  differ("architecture", to_string(p.model.architecture), to_string(m.architecture));
  number("hidden_size", p.model.hidden_size, m.hidden_size);
  number("num_attention_heads", p.model.num_attention_heads, m.num_attention_heads);
  number("num_kv_heads", p.model.num_kv_heads, m.num_kv_heads);
  number("ffn_hidden_size", p.model.ffn_hidden_size, m.ffn_hidden_size);
  number("seq_length", p.model.seq_length, m.seq_length);
  number("vocab_size", p.model.vocab_size, m.vocab_size);
  return out;
}

}  // namespace het
