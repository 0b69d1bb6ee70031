#include "setup/presets.h"

#include <fstream>
#include <span>

#include "kernels/registry.h"
#include "tuner/embedded_file.h"

namespace dflash {
extern const EmbeddedFile kPresetConfigFiles[];  // setup/presets/*.json (setup/CMakeLists.txt)
extern const std::size_t kPresetConfigFiles_count;
}  // namespace dflash

namespace dflash::setup {
namespace {

struct PresetShape {
  const char* name;
  std::int64_t max_length, num_anchors;
};
constexpr PresetShape kPresets[] = {{"dflash-27b", 4096, 512}, {"tiny", 512, 16}};

Result<nlohmann::json> EmbeddedJson(const std::string& file) {
  for (const EmbeddedFile& f : std::span(kPresetConfigFiles, kPresetConfigFiles_count)) {
    if (file != f.name) continue;
    nlohmann::json j = nlohmann::json::parse(f.text(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Internal("embedded preset file " + file + " is not a JSON object");
    return j;
  }
  return Internal("preset file " + file + " is not embedded in this binary");
}

Result<nlohmann::json> ReadJson(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) return NotFound("cannot open " + p.string());
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(p.string() + " is not a JSON object");
  return j;
}

const PresetShape* FindPreset(const std::string& name) {
  for (const PresetShape& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const PresetShape& p : kPresets) names.emplace_back(p.name);
  return names;
}

Result<TrainingSetup> Preset(const std::string& name) {
  const PresetShape* shape = FindPreset(name);
  if (!shape) {
    std::string known;
    for (const auto& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown preset '" + name + "' (known: " + known + ")");
  }
  TrainingSetup s;
  DFLASH_ASSIGN_OR_RETURN(nlohmann::json target, EmbeddedJson(name + ".target.json"));
  DFLASH_ASSIGN_OR_RETURN(nlohmann::json drafter, EmbeddedJson(name + ".drafter.json"));
  DFLASH_ASSIGN_OR_RETURN(s.target, ParseTargetConfig(target, name + ".target.json"));
  DFLASH_ASSIGN_OR_RETURN(s.drafter, ParseDrafterConfig(drafter, name + ".drafter.json"));
  s.max_length = shape->max_length;
  s.num_anchors = shape->num_anchors;
  return s;
}

Result<TrainingSetup> SetupFromConfigFile(const std::filesystem::path& file) {
  DFLASH_ASSIGN_OR_RETURN(nlohmann::json j, ReadJson(file));
  TrainingSetup s;
  // The file's own fields first, so their errors name them (not a field of a referenced config).
  if (!j.contains("target_config") || !j["target_config"].is_string()) {
    return InvalidArgument(file.string() + ": needs \"target_config\": \"path/to/config.json\"");
  }
  if (j.contains("drafter_config") && !j["drafter_config"].is_string()) {
    return InvalidArgument(file.string() + ": \"drafter_config\" must be a path");
  }
  std::int64_t batch_size = 1;
  for (auto [name, field] : {std::pair{"max_length", &s.max_length}, {"batch_size", &batch_size},
                             {"num_anchors", &s.num_anchors}, {"loss_chunk_rows", &s.loss_chunk_rows}}) {
    if (!j.contains(name)) continue;
    if (!j[name].is_number_integer() || j[name].get<std::int64_t>() < 1) {
      return InvalidArgument(file.string() + ": \"" + name + "\" must be a positive integer");
    }
    *field = j[name].get<std::int64_t>();
  }
  if (j.contains("rows")) {
    const std::string rows = j["rows"].is_string() ? j["rows"].get<std::string>() : "";
    if (rows != "both" && rows != "pad" && rows != "pack") {
      return InvalidArgument(file.string() + ": \"rows\" must be \"both\", \"pad\" or \"pack\"");
    }
    s.padded_rows = rows != "pack";
    s.packed_rows = rows != "pad";
  }
  const std::filesystem::path base = file.parent_path();
  const std::filesystem::path target_file = base / j["target_config"].get<std::string>();
  DFLASH_ASSIGN_OR_RETURN(s.target, LoadTargetConfig(target_file));
  if (j.contains("drafter_config")) {
    DFLASH_ASSIGN_OR_RETURN(s.drafter, LoadDrafterConfig(base / j["drafter_config"].get<std::string>()));
  }
  return s;
}

Result<KernelRequest> ParseProblemArg(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos) return InvalidArgument("--problem wants FAMILY=JSON, got '" + arg + "'");
  const std::string name = arg.substr(0, eq);
  const tuner::KernelFamily* f = kernels::FindFamily(name);
  if (!f) return InvalidArgument("unknown kernel family '" + name + "' (see `dflash-tune families`)");
  nlohmann::json j = nlohmann::json::parse(arg.substr(eq + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--problem " + name + ": not a JSON object");
  return KernelRequest{"--problem " + name, f, j};
}

}  // namespace dflash::setup
