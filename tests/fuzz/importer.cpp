// Feeds: any bytes as one file of a peer-data tree (the shipped sample of Sailor's, tests/data/
// sailor, copied once to a per-process temporary directory): the first byte picks which file the
// rest replaces — Sailor's profile.json, a Metis mbs<b>_tmp<t>.json, misc/llm_info.json (given
// as --llm-info) or misc/training_config_opt_350.json — then importer::import_profile runs for
// OPT-350 on A100-40 in that format, and the file is put back.
// Checks: no crash, hang or unbounded memory; a refusal says why; an imported profile's text
// (write_profile) reads back with read_profile, as `hetplan profile import` requires before it
// writes the file (else it reports an internal error).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "fuzz.hpp"
#include "importer/importer.hpp"

using namespace het;
namespace fs = std::filesystem;

namespace {

struct Slot {
  const char* path;    // in the tree
  const char* format;  // the import it feeds
  bool llm_info;       // give misc/llm_info.json as --llm-info
};
constexpr Slot kSlots[] = {
    {"sailor_planner/profiles/OPT-350/A100-40/profile.json", "sailor", false},
    {"baselines/Metis/profiles/OPT-350/A100-40/mbs1_tmp1.json", "metis", false},
    {"misc/llm_info.json", "sailor", true},
    {"misc/training_config_opt_350.json", "sailor", false},
};

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void write(const fs::path& file, std::string_view text) { std::ofstream(file, std::ios::binary | std::ios::trunc) << text; }

// The harness's fixture, made at the first input: the tree (removed at exit), the model and
// the shipped text of each slot's file.
struct Tree {
  fs::path root;
  ModelSpec model;
  std::string original[std::size(kSlots)];
  Tree() {
    root = fs::temp_directory_path() / ("het-fuzz-importer." + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::copy(HET_SOURCE_DIR "/tests/data/sailor", root, fs::copy_options::recursive);
    model = *load_model(HET_SOURCE_DIR "/configs/models/opt-350m.yaml");
    for (std::size_t i = 0; i < std::size(kSlots); ++i) original[i] = read(root / kSlots[i].path);
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  static Tree& tree() {
    static Tree t;
    return t;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Tree& t = Tree::tree();
  const std::size_t which = data[0] % std::size(kSlots);
  const Slot& slot = kSlots[which];
  write(t.root / slot.path, fuzz::text(data + 1, size - 1));
  importer::Options o;
  o.format = slot.format;
  o.dir = (t.root / (o.format == "sailor" ? "sailor_planner" : "baselines/Metis") / "profiles/OPT-350/A100-40").string();
  o.model = t.model;
  o.model_file = "opt-350m.yaml";
  if (slot.llm_info) o.llm_info = (t.root / "misc/llm_info.json").string();
  auto profile = importer::import_profile(o);
  write(t.root / slot.path, t.original[which]);
  if (!profile) {
    for (const auto& d : profile.errors()) fuzz::require(!d.message.empty(), "a refusal says why", d.to_string());
    return 0;
  }
  const std::string text = write_profile(*profile, "imported");
  auto doc = input::parse(text, "imported.yaml");
  auto reread = doc ? read_profile(*doc) : Result<ProfileSpec>(doc.errors());
  fuzz::require(reread.ok(), "an imported profile reads back (else `hetplan profile import` reports an internal error)",
                (reread ? "" : to_string(reread.errors())) + "\n" + text);
  return 0;
}
