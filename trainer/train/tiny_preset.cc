#include "trainer/train/tiny_preset.h"

#include <chrono>
#include <fstream>

#include "base/atomic_file.h"
#include "kernels/presets.h"
#include "trainer/checkpoint/model_config.h"
#include "trainer/checkpoint/target_tensors.h"
#include "trainer/models/drafter_config.h"
#include "trainer/models/target_model.h"
#include "trainer/train/synthetic_data.h"

namespace dflash::trainer {
namespace fs = std::filesystem;
namespace {

constexpr std::int64_t kMaxLength = 512;  // kernels/presets.cc "tiny"
constexpr std::int64_t kAnchors = 16;

// The full target config.json of the preset: the kernel preset's shapes plus the fields a loader needs.
Result<nlohmann::json> TinyTargetConfigJson() {
  DFLASH_ASSIGN_OR_RETURN(kernels::TrainingShapes shapes, kernels::PresetShapes("tiny"));
  nlohmann::json t = shapes.target;
  t["rms_norm_eps"] = 1e-6;
  t["rope_theta"] = 1e7;
  t["partial_rotary_factor"] = 0.25;
  t["tie_word_embeddings"] = false;
  t["attn_output_gate"] = true;
  return t;
}

Result<DrafterConfig> TinyDrafterConfig(const TargetConfig& target) {
  DFLASH_ASSIGN_OR_RETURN(kernels::TrainingShapes shapes, kernels::PresetShapes("tiny"));
  const nlohmann::json& d = shapes.drafter;
  DrafterConfig c;
  c.hidden_size = d.at("hidden_size").get<std::int64_t>();
  c.intermediate_size = 2 * c.hidden_size;
  c.num_hidden_layers = d.at("num_hidden_layers").get<std::int64_t>();
  c.num_attention_heads = d.at("num_attention_heads").get<std::int64_t>();
  c.num_key_value_heads = d.at("num_key_value_heads").get<std::int64_t>();
  c.head_dim = d.at("head_dim").get<std::int64_t>();
  c.vocab_size = target.vocab_size;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e7;
  c.block_size = d.at("block_size").get<std::int64_t>();
  c.mask_token_id = target.vocab_size - 1;
  c.num_target_layers = target.num_hidden_layers;
  // The 27B drafter's layout in small: sliding layers first, the full one last.
  c.layer_kinds.assign(c.num_hidden_layers, DrafterLayerKind::kSlidingAttention);
  c.layer_kinds.back() = DrafterLayerKind::kFullAttention;
  c.sliding_window = d.at("sliding_window").get<std::int64_t>();
  return ResolveDrafterConfig(c);
}

nlohmann::json PresetMarker(const TinyPresetSize& s) {
  return {{"preset", "tiny"},          {"samples", s.samples},         {"prompt_tokens", s.prompt_tokens},
          {"continuation_tokens", s.continuation_tokens}, {"eval_prompts", s.eval_prompts}, {"seed", s.seed},
          {"target_init_std", s.target_init_std},
          {"target_embed_std", s.target_embed_std}};
}

}  // namespace

Status PrepareTinyPreset(const fs::path& dir, const TinyPresetSize& size, std::ostream& log) {
  const nlohmann::json marker = PresetMarker(size);
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
  DFLASH_ASSIGN_OR_RETURN(nlohmann::json target_json, TinyTargetConfigJson());
  DFLASH_ASSIGN_OR_RETURN(TargetConfig target_config, ParseTargetConfig(target_json, "tiny preset target"));
  DFLASH_ASSIGN_OR_RETURN(DrafterConfig drafter_config, TinyDrafterConfig(target_config));

  TargetLoadOptions options;
  options.dtype = torch::kFloat;
  options.full = true;
  options.taps = drafter_config.target_layer_ids;
  auto random = TargetModel::RandomInit(target_config, options, size.seed, size.target_init_std);
  auto weights = random->weights();
  const std::string embed_name = TargetEmbeddingName(target_config);
  weights[embed_name] = weights.at(embed_name) * (size.target_embed_std / size.target_init_std);
  DFLASH_ASSIGN_OR_RETURN(auto target, TargetModel::FromWeights(target_config, options, weights));
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
  TrainOptions o;
  o.target_dir = dir / "target";
  o.drafter_config = dir / "drafter_config.json";
  o.data = dir / "data" / "train.jsonl";
  o.output_dir = output_dir;
  o.max_length = kMaxLength;
  o.num_anchors = kAnchors;
  o.batch_size = 1;
  o.grad_accum = 1;
  o.epochs = 2;
  o.lr = 2e-3;
  o.warmup_fraction = 0.04;
  o.save_every = 100;
  return o;
}

}  // namespace dflash::trainer
