// The plan pictures of `hetplan show --format svg|html` (libplan/render).
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <set>
#include <vector>

#include "plan/plan_io.hpp"
#include "predict/predict.hpp"
#include "render/render.hpp"
#include "test_util.hpp"

using namespace het;

namespace {

predict::Outcome predicted(const Plan& plan) {
  cost::ComputeModel cm(plan.model, {});
  predict::Options o;
  o.trace = true;
  auto out = predict::predict(plan, cm, o);
  if (!out) throw std::runtime_error(to_string(out.errors()));
  return *out;
}

Plan load(const std::string& plan_file, const std::string& model = "", const std::string& cluster = "") {
  InputFiles files;
  files.plan = plan_file;
  if (!model.empty()) files.model = model;
  if (!cluster.empty()) files.cluster = cluster;
  auto loaded = load_plan_inputs(files);
  if (!loaded) throw std::runtime_error(to_string(loaded.errors()));
  return loaded->plan;
}

// "" when the text is well-formed XML as far as this writer goes: every tag closed in order,
// attribute values quoted, no stray '<' or '&' in text. Else what is wrong and where.
std::string xml_problem(const std::string& x) {
  std::vector<std::string> open;
  std::size_t i = 0;
  auto bad_ampersand = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to; ++k)
      if (x[k] == '&' && !std::regex_search(x.substr(k, 8), std::regex("^&(amp|lt|gt|quot|#39|#[0-9]+);"))) return true;
    return false;
  };
  while (i < x.size()) {
    const std::size_t lt = x.find('<', i);
    if (bad_ampersand(i, lt == std::string::npos ? x.size() : lt)) return "a raw '&' in text after " + std::to_string(i);
    if (lt == std::string::npos) break;
    if (x.compare(lt, 4, "<!--") == 0) {
      i = x.find("-->", lt) + 3;
      continue;
    }
    const std::size_t gt = x.find('>', lt);
    if (gt == std::string::npos) return "an unclosed tag at " + std::to_string(lt);
    const std::string tag = x.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return "a '<' inside the tag at " + std::to_string(lt);
    if (bad_ampersand(lt, gt)) return "a raw '&' in the tag at " + std::to_string(lt);
    if (tag.front() == '?') {
      if (lt != 0 || tag.back() != '?') return "a misplaced declaration";
    } else if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
      // Attributes: name="value" pairs only.
      std::string attrs = tag.substr(name.size());
      if (!attrs.empty() && attrs.back() == '/') attrs.pop_back();
      if (!std::regex_match(attrs, std::regex(R"re((\s+[A-Za-z_:][-A-Za-z0-9_:.]*="[^"<]*")*\s*)re")))
        return "bad attributes in <" + name + "> at " + std::to_string(lt);
      if (tag.back() != '/') open.push_back(name);
    }
    i = gt + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  return "";
}

struct Device {
  std::string subcluster, stage, fill;
  int node = 0, device = 0;
};

std::vector<Device> devices(const std::string& svg) {
  std::vector<Device> out;
  const std::regex rect(R"re(<rect [^>]*fill="(#[0-9a-f]{6})" class="device" data-subcluster="([^"]*)" data-node="(\d+)" data-device="(\d+)" data-stage="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator(); ++it)
    out.push_back({(*it)[2], (*it)[5], (*it)[1], std::stoi((*it)[3]), std::stoi((*it)[4])});
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Every device of every stage appears once with its stage's colour; stages have different
// colours (identical replica pipelines share theirs); the other devices are unused.
void check_devices(const Plan& plan, const std::string& svg) {
  const auto drawn = devices(svg);
  REQUIRE(drawn.size() == static_cast<std::size_t>(plan.cluster.num_devices()));
  std::map<std::tuple<std::string, int, int>, Device> at;
  for (const auto& d : drawn) CHECK(at.emplace(std::tuple{d.subcluster, d.node, d.device}, d).second);
  std::map<std::string, std::string> colour_of_stage;  // "p0 s1" -> fill
  std::size_t used = 0;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p)
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s) {
      const Stage& st = plan.pipelines[p].stages[s];
      const std::string name = "p" + std::to_string(p) + " s" + std::to_string(s);
      for (const auto& d : st.devices) {
        INFO(name << " " << st.subcluster << " node " << d.node << " device " << d.device);
        auto it = at.find({st.subcluster, d.node, d.device});
        REQUIRE(it != at.end());
        CHECK(it->second.stage == name);
        auto [c, fresh] = colour_of_stage.emplace(name, it->second.fill);
        CHECK(c->second == it->second.fill);
        ++used;
      }
    }
  CHECK(static_cast<std::size_t>(std::count_if(drawn.begin(), drawn.end(), [](const Device& d) { return d.stage == "unused"; })) ==
        drawn.size() - used);
  // Different stages of one pipeline never share a colour.
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    std::set<std::string> seen;
    for (std::size_t s = 0; s < plan.pipelines[p].stages.size(); ++s)
      CHECK(seen.insert(colour_of_stage["p" + std::to_string(p) + " s" + std::to_string(s)]).second);
  }
}

std::size_t hops(const Plan& plan, bool cross_only) {
  std::size_t n = 0;
  for (const auto& p : plan.pipelines)
    for (std::size_t s = 0; s + 1 < p.stages.size(); ++s)
      n += !cross_only || p.stages[s].subcluster != p.stages[s + 1].subcluster;
  return n;
}

}  // namespace

TEST_CASE("render: the mixed plan's SVG is well-formed, every device in its stage colour, one arrow per hop, one lane per stage") {
  const auto outcome = predicted(test::mixed_plan());
  const Plan& plan = outcome.plan;
  const std::string svg = render::svg(outcome);
  INFO(svg.substr(0, 2000));
  CHECK(xml_problem(svg) == "");
  CHECK_THAT(svg, Catch::StartsWith("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""));
  check_devices(plan, svg);
  CHECK(count(svg, "class=\"device\"") == 8);
  CHECK(count(svg, "data-stage=\"unused\"") == 3);  // v100 devices 1..3
  // Pipeline order: a100 tp 2 -> a100 dp 2 -> v100, one arrow per hop of each distinct
  // pipeline layout; one hop leaves the subcluster, labelled with the demo cluster's link.
  CHECK(count(svg, "<path class=\"hop") == hops(plan, false));
  CHECK(count(svg, "<path class=\"hop cross\"") == hops(plan, true));
  CHECK(hops(plan, true) == 1);
  CHECK(count(svg, "class=\"link-label\"") == 1);
  CHECK_THAT(svg, Catch::Contains(">19.2 Gbit/s, 100 us</text>"));
  // Timeline: one lane per stage, with forwards, backwards and transfers, and the summary.
  CHECK(count(svg, "class=\"lane\"") == 3);
  for (const char* lane : {"data-lane=\"p0 s0\"", "data-lane=\"p0 s1\"", "data-lane=\"p0 s2\""}) CHECK_THAT(svg, Catch::Contains(lane));
  for (const char* colour : {"#4c78c8", "#e8833a", "#3a9d4a", "#96cf6f"}) CHECK(count(svg, "fill=\"" + std::string(colour) + "\"") > 1);
  CHECK_THAT(svg, Catch::Contains("iteration") && Catch::Contains("tokens/s") && Catch::Contains("MFU") &&
                      Catch::Contains("peak memory / capacity"));
  // Self-contained: nothing fetched, nothing run.
  CHECK(count(svg, "http") == 1);  // the SVG namespace
  CHECK(count(svg, "<script") == 0);
  CHECK(count(svg, "href") == 0);
  // A pure function.
  CHECK(render::svg(predicted(test::mixed_plan())) == svg);
}

TEST_CASE("render: the HTML page holds the SVG, the summary and the stage table") {
  const auto outcome = predicted(test::mixed_plan());
  const std::string html = render::html(outcome);
  CHECK_THAT(html, Catch::StartsWith("<!DOCTYPE html>"));
  CHECK(xml_problem(html.substr(html.find("<html"))) == "");  // written as XHTML-compatible markup
  const auto begin = html.find("<svg"), end = html.find("</svg>");
  REQUIRE(begin != std::string::npos);
  CHECK(xml_problem(html.substr(begin, end + 6 - begin)) == "");
  CHECK(count(html, "class=\"device\"") == 8);
  CHECK_THAT(html, Catch::Contains("<table class=\"summary\">") && Catch::Contains("<table class=\"stages\">"));
  CHECK(count(html, "<tr><td>") == 3);  // one row per stage
  CHECK(count(html, "<script") == 0);
  CHECK(count(html, "href") == 0);
}

TEST_CASE("render: identical replica pipelines share colours and lanes, different ones do not") {
  const std::string src = HET_SOURCE_DIR;
  const auto two = predicted(load(src + "/tests/data/plans/two-pipelines.plan.json", src + "/configs/models/tiny-gpt.yaml",
                                  src + "/configs/clusters/demo-1x4a100-1x4v100.yaml"));
  const std::string svg = render::svg(two);
  CHECK(xml_problem(svg) == "");
  check_devices(two.plan, svg);
  CHECK(count(svg, "class=\"lane\"") == 4);  // two different layouts: 2 + 2 lanes
  CHECK(count(svg, "<path class=\"hop") == 2);

  const auto hapt = predicted(load(src + "/docs/examples/hapt-gpt-15b.plan.json"));
  REQUIRE(hapt.plan.pipelines.size() == 8);
  const std::string h = render::svg(hapt);
  CHECK(xml_problem(h) == "");
  check_devices(hapt.plan, h);
  CHECK(count(h, "class=\"lane\"") == hapt.plan.pipelines[0].stages.size());  // 8 replicas, one set of lanes
  CHECK_THAT(h, Catch::Contains("data-lane=\"p0-7 s0\""));
  CHECK(count(h, "<path class=\"hop") == hapt.plan.pipelines[0].stages.size() - 1);  // per layout, not per replica
  CHECK(count(h, "class=\"link-label\"") == 1);  // a100 - v100, labelled once
}

TEST_CASE("render: names from the inputs are escaped") {
  Plan plan = test::mixed_plan();
  plan.model.name = "<script>alert('x')</script> & \"more\"\x01";
  plan.cluster.name = "a<b>&c";
  const auto outcome = predicted(plan);
  for (const std::string& text : {render::svg(outcome), render::html(outcome)}) {
    CHECK(count(text, "<script") == 0);
    CHECK_THAT(text, Catch::Contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;more&quot;\xEF\xBF\xBD"));
    CHECK_THAT(text, Catch::Contains("a&lt;b&gt;&amp;c"));
    CHECK(count(text, "\x01") == 0);
  }
  CHECK(xml_problem(render::svg(outcome)) == "");
  CHECK(render::escape("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d&quot;e&#39;f");
}

TEST_CASE("render: 736 devices of HetAuto's exp3 fit the picture, with lanes per stage and merged operations") {
  const std::string src = HET_SOURCE_DIR;
  const auto outcome = predicted(load(src + "/docs/examples/hetauto-exp3.plan.json"));
  const Plan& plan = outcome.plan;
  REQUIRE(plan.cluster.num_devices() == 736);
  const std::string svg = render::svg(outcome);
  CHECK(xml_problem(svg) == "");
  check_devices(plan, svg);
  CHECK(count(svg, "<path class=\"hop") == plan.pipelines[0].stages.size() - 1);
  // Replicas share lanes: one per stage of the layout, not one per pipeline and stage.
  CHECK(count(svg, "class=\"lane\"") == plan.pipelines[0].stages.size());
  // Everything lies inside the picture's 1280 px.
  const std::regex xw(R"re(<rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)")re");
  double right = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), xw); it != std::sregex_iterator(); ++it)
    right = std::max(right, std::stod((*it)[1]) + std::stod((*it)[2]));
  CHECK(right <= 1280.01);
  const auto height = std::stod(svg.substr(svg.find("height=\"") + 8));
  CHECK(height < 1400);
  // 64 micro-batches × 11 stages × (F, B, 2 sends) are thousands of operations; what is
  // closer than a pixel is merged.
  CHECK(svg.size() < 600000);
}
