#include "trainer/train/tiny_preset.h"

#include <chrono>
#include <fstream>

#include "base/atomic_file.h"
#include "setup/presets.h"
#include "trainer/checkpoint/target_tensors.h"
#include "trainer/models/drafter_config.h"
#include "trainer/models/target_config_json.h"
#include "trainer/models/target_model.h"
#include "trainer/train/synthetic_data.h"

namespace dflash::trainer {
namespace fs = std::filesystem;
namespace {

// The preset's models and shapes: setup/presets/tiny.{target,drafter}.json and setup::Preset("tiny"), the setup
// `dflash-tune warmup --preset tiny` warms.
constexpr const char* kPresetName = "tiny";

// What the files are made of: the sizes and the preset's model configs (a changed config is not reused).
nlohmann::json PresetMarker(const TinyPresetSize& s, const setup::TrainingSetup& preset) {
  return {{"preset", "tiny"},          {"samples", s.samples},         {"prompt_tokens", s.prompt_tokens},
          {"continuation_tokens", s.continuation_tokens}, {"eval_prompts", s.eval_prompts}, {"seed", s.seed},
          {"target_init_std", s.target_init_std},
          {"target_embed_std", s.target_embed_std},
          {"target_config", TargetConfigJson(preset.target, torch::kFloat)},
          {"drafter_config", DrafterConfigJson(*preset.drafter, torch::kBFloat16)}};
}

}  // namespace

std::unique_ptr<TargetModel> TinyPresetTarget(const TinyPresetSize& size) {
  auto preset = setup::Preset(kPresetName);
  TORCH_CHECK(preset.ok(), preset.status().ToString());  // embedded in the binary: cannot fail
  auto drafter_config = ResolveDrafterConfig(*preset->drafter);
  TORCH_CHECK(drafter_config.ok(), drafter_config.status().ToString());
  TargetLoadOptions options;
  options.dtype = torch::kFloat;
  options.full = true;
  options.taps = drafter_config->target_layer_ids;
  auto random = TargetModel::RandomInit(preset->target, options, size.seed, size.target_init_std);
  auto weights = random->weights();
  const std::string embed_name = TargetEmbeddingName(preset->target);
  weights[embed_name] = weights.at(embed_name) * (size.target_embed_std / size.target_init_std);
  auto target = TargetModel::FromWeights(preset->target, options, weights);
  TORCH_CHECK(target.ok(), target.status().ToString());
  return std::move(*target);
}

Status PrepareTinyPreset(const fs::path& dir, const TinyPresetSize& size, std::ostream& log) {
  DFLASH_ASSIGN_OR_RETURN(setup::TrainingSetup preset, setup::Preset(kPresetName));
  const nlohmann::json marker = PresetMarker(size, preset);
  {
    std::ifstream f(dir / "preset.json");
    if (f) {
      auto existing = nlohmann::json::parse(f, nullptr, false);
      if (!existing.is_discarded() && existing == marker) {
        log << "tiny preset: reusing " << dir.string() << "\n";
        return Status::Ok();
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(dir / "data", ec);
  if (ec) return IoError("cannot create " + (dir / "data").string() + ": " + ec.message());
  DFLASH_ASSIGN_OR_RETURN(setup::DrafterConfig drafter_config, ResolveDrafterConfig(*preset.drafter));

  std::unique_ptr<TargetModel> target;
  try {
    target = TinyPresetTarget(size);
  } catch (const c10::Error& e) {
    return Internal(std::string("tiny preset target: ") + e.what_without_backtrace());
  }
  DFLASH_RETURN_IF_ERROR(target->SaveHf(dir / "target"));
  DFLASH_RETURN_IF_ERROR(
      AtomicWriteText(dir / "drafter_config.json", DrafterConfigJson(drafter_config, torch::kBFloat16).dump(2) + "\n"));

  SyntheticDataOptions data_options;
  data_options.num_samples = size.samples;
  data_options.prompt_tokens = size.prompt_tokens;
  data_options.continuation_tokens = size.continuation_tokens;
  data_options.num_eval_prompts = size.eval_prompts;
  data_options.seed = size.seed;
  data_options.excluded_token_ids = {drafter_config.mask_token_id};
  log << "tiny preset: sampling " << size.samples << " sequences of " << size.prompt_tokens << " + "
      << size.continuation_tokens << " tokens from the random target..." << std::flush;
  DFLASH_ASSIGN_OR_RETURN(SyntheticData synthetic, GenerateSyntheticData(*target, data_options));
  DFLASH_RETURN_IF_ERROR(WriteJsonl(dir / "data" / "train.jsonl", synthetic.train));
  DFLASH_RETURN_IF_ERROR(WriteJsonl(dir / "data" / "eval_prompts.jsonl", synthetic.eval_prompts));
  DFLASH_RETURN_IF_ERROR(AtomicWriteText(dir / "preset.json", marker.dump(2) + "\n"));  // last: marks it complete
  log << " done in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s\n";
  return Status::Ok();
}

TrainOptions TinyPresetOptions(const fs::path& dir, const fs::path& output_dir) {
  auto preset = setup::Preset(kPresetName);
  TORCH_CHECK(preset.ok(), preset.status().ToString());  // embedded in the binary: cannot fail
  TrainOptions o;
  o.target_dir = dir / "target";
  o.drafter_config = dir / "drafter_config.json";
  o.data = dir / "data" / "train.jsonl";
  o.output_dir = output_dir;
  o.max_length = preset->max_length;
  o.num_anchors = preset->num_anchors;
  o.batch_size = 1;
  o.grad_accum = 1;
  o.epochs = 2;
  o.row_mode = data::RowMode::kPack;  // two documents a row (max_length 512, samples of 256)
  o.lr = 2e-3;
  o.warmup_fraction = 0.04;
  o.save_every = 100;
  return o;
}

}  // namespace dflash::trainer
