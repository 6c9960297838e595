#include "spec/profile.hpp"

#include <map>
#include <tuple>

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

Result<ProfileSpec> read_profile(const input::Document& doc) {
  Diagnostics errors;
  input::Context ctx{doc.file, &errors};
  input::Fields top(ctx, doc.root, "", {"format", "device", "model", "units", "optimizer_step", "links"});
  if (!top.is_map()) return errors;
  if (auto format = top.string("format", Need::required); format && *format != "hetplan.profile/v1")
    top.error("format", "expected hetplan.profile/v1, got '" + *format + "'");
  ProfileSpec p;
  p.device = top.string("device", Need::required).value_or("");
  if (auto m = top.map("model", Need::required,
                       {"architecture", "hidden_size", "num_attention_heads", "seq_length", "num_kv_heads",
                        "ffn_hidden_size", "vocab_size"})) {
    p.model.architecture = m->choice<Architecture>("architecture", Need::required,
                                                   {{"gpt", Architecture::gpt}, {"llama", Architecture::llama}})
                               .value_or(Architecture::gpt);
    p.model.hidden_size = static_cast<int>(m->integer("hidden_size", Need::required).value_or(0));
    p.model.num_attention_heads = static_cast<int>(m->integer("num_attention_heads", Need::required).value_or(0));
    p.model.seq_length = static_cast<int>(m->integer("seq_length", Need::required).value_or(0));
    for (auto [key, field] : {std::pair{"num_kv_heads", &p.model.num_kv_heads}, std::pair{"ffn_hidden_size", &p.model.ffn_hidden_size},
                              std::pair{"vocab_size", &p.model.vocab_size}})
      if (auto v = m->integer(key, Need::optional)) *field = static_cast<int>(*v);
  }
  using Shape = std::tuple<UnitKind, int, int, int, int>;
  std::map<Shape, int> shapes;  // -> line of the first row with that shape
  if (auto list = top.list("units", Need::required)) {
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
      r.tp = static_cast<int>(f.integer("tp", Need::optional).value_or(1));
      r.cp = static_cast<int>(f.integer("cp", Need::optional).value_or(1));
      r.micro_batch_size = static_cast<int>(f.integer("micro_batch_size", Need::required).value_or(1));
      r.seq_length = static_cast<int>(f.integer("seq_length", Need::optional).value_or(p.model.seq_length));
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
  p.optimizer_step = top.quantity("optimizer_step", Dimension::time, Need::optional, true);
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

ProfileModel profile_model(const ModelSpec& m) {
  return {m.architecture, m.hidden_size, m.num_attention_heads, m.seq_length, m.num_kv_heads, m.ffn_hidden_size, m.vocab_size};
}

std::string profile_mismatch(const ProfileSpec& p, const ModelSpec& m) {
  std::string diff;
  auto check = [&](const char* what, long have, long want) {
    if (have != want)
      diff += std::string(diff.empty() ? "" : ", ") + what + " " + std::to_string(have) + " (model: " +
              std::to_string(want) + ")";
  };
  if (p.model.architecture != m.architecture)
    diff += std::string("architecture ") + to_string(p.model.architecture) + " (model: " +
            to_string(m.architecture) + ")";
  check("hidden_size", p.model.hidden_size, m.hidden_size);
  check("num_attention_heads", p.model.num_attention_heads, m.num_attention_heads);
  if (p.model.num_kv_heads) check("num_kv_heads", *p.model.num_kv_heads, m.num_kv_heads);
  if (p.model.ffn_hidden_size) check("ffn_hidden_size", *p.model.ffn_hidden_size, m.ffn_hidden_size);
  if (p.model.vocab_size) check("vocab_size", *p.model.vocab_size, m.vocab_size);
  if (diff.empty()) return diff;
  return "the profile was measured for a different model shape: " + diff;
}

}  // namespace het
