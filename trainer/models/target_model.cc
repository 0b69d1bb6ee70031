#include "trainer/models/target_model.h"

#include <utility>

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/target_tensors.h"
#include "trainer/models/target_config_json.h"
#include "trainer/models/target_layers.h"
#include "trainer/models/target_weights.h"
#include "trainer/nn/layers.h"
#include "trainer/nn/tensor_io.h"

namespace dflash::trainer {
namespace {

Status CheckOptions(const setup::TargetConfig& c, const TargetLoadOptions& o) {
  if (!torch::isFloatingType(o.dtype)) {
    return InvalidArgument(std::string("target dtype must be a float type, got ") + c10::toString(o.dtype));
  }
  if (!o.full && o.taps.empty()) {
    return InvalidArgument("a features-only target (full = false) needs at least one tapped layer");
  }
  for (std::size_t i = 0; i < o.taps.size(); ++i) {
    const std::int64_t tap = o.taps[i];
    if (tap < 0 || tap >= c.num_hidden_layers) {
      return InvalidArgument("tapped layer " + std::to_string(tap) + " is outside the target's " +
                             std::to_string(c.num_hidden_layers) + " layers");
    }
    if (i > 0 && tap <= o.taps[i - 1]) {
      return InvalidArgument("tapped layers must be strictly ascending, got " + std::to_string(o.taps[i - 1]) +
                             " then " + std::to_string(tap));
    }
  }
  if (c.weight_prefix != "model." && c.weight_prefix != "model.language_model.") {
    return InvalidArgument("target weight_prefix must be \"model.\" or \"model.language_model.\", got \"" +
                           c.weight_prefix + "\"");
  }
  return Status::Ok();
}

std::int64_t LastLayer(const setup::TargetConfig& c, const TargetLoadOptions& o) {
  return o.full ? c.num_hidden_layers - 1 : o.taps.back();
}

Result<std::vector<TensorSpec>> SpecsFor(const setup::TargetConfig& c, const TargetLoadOptions& o) {
  DFLASH_RETURN_IF_ERROR(CheckOptions(c, o));
  return TargetModelTensors(c, LastLayer(c, o), o.full);
}

}  // namespace

TargetModel::TargetModel(setup::TargetConfig config, TargetLoadOptions options,
                         std::map<std::string, torch::Tensor> weights)
    : config_(std::move(config)), options_(std::move(options)), weights_(std::move(weights)) {}

Result<std::unique_ptr<TargetModel>> TargetModel::Load(const std::filesystem::path& dir,
                                                       const TargetLoadOptions& options) {
  DFLASH_ASSIGN_OR_RETURN(setup::TargetConfig config, setup::LoadTargetConfig(dir));
  DFLASH_ASSIGN_OR_RETURN(auto specs, SpecsFor(config, options));
  DFLASH_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  DFLASH_RETURN_IF_ERROR(checkpoint.CheckTensors(specs));
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> weights;
  for (const auto& spec : specs) {
    DFLASH_ASSIGN_OR_RETURN(weights[spec.name],
                            nn::ReadTensor(checkpoint, spec.name, spec.shape, options.device,
                                           TargetStorageDtype(spec.name, options.dtype)));
  }
  return std::unique_ptr<TargetModel>(new TargetModel(std::move(config), options, std::move(weights)));
}

Result<std::unique_ptr<TargetModel>> TargetModel::FromWeights(const setup::TargetConfig& config,
                                                              const TargetLoadOptions& options,
                                                              const std::map<std::string, torch::Tensor>& weights) {
  DFLASH_ASSIGN_OR_RETURN(auto specs, SpecsFor(config, options));
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> held;
  for (const auto& spec : specs) {
    auto it = weights.find(spec.name);
    if (it == weights.end() || !it->second.defined()) return NotFound("target tensor " + spec.name + " is missing");
    const auto sizes = it->second.sizes();
    if (std::vector<std::int64_t>(sizes.begin(), sizes.end()) != spec.shape) {
      std::vector<std::int64_t> got(sizes.begin(), sizes.end());
      return InvalidArgument("target tensor " + spec.name + " has shape " + ShapeToString(got) + ", expected " +
                             ShapeToString(spec.shape));
    }
    held[spec.name] = it->second.detach().to(options.device, TargetStorageDtype(spec.name, options.dtype));
  }
  return std::unique_ptr<TargetModel>(new TargetModel(config, options, std::move(held)));
}

std::unique_ptr<TargetModel> TargetModel::RandomInit(const setup::TargetConfig& config,
                                                     const TargetLoadOptions& options, std::uint64_t seed,
                                                     double init_std) {
  auto specs = SpecsFor(config, options);
  TORCH_CHECK(specs.ok(), "TargetModel::RandomInit: ", specs.status().message());
  torch::NoGradGuard no_grad;
  auto weights = RandomTargetWeights(config, *specs, seed, init_std, options.dtype, options.device);
  return std::unique_ptr<TargetModel>(new TargetModel(config, options, std::move(weights)));
}

Status TargetModel::SaveHf(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir.string() + ": " + ec.message());
  DFLASH_RETURN_IF_ERROR(
      nn::SaveTensors(dir / kSingleSafetensorsName, nn::NamedTensors(weights_.begin(), weights_.end())));
  return WriteTargetConfig(dir / "config.json", config_, options_.dtype);
}

const torch::Tensor& TargetModel::embed_tokens() const {
  return TargetWeight(weights_, TargetEmbeddingName(config_));
}

const torch::Tensor& TargetModel::lm_head() const { return TargetWeight(weights_, TargetLmHeadName(config_)); }

std::vector<torch::Tensor> TargetModel::RunLayers(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                                                  TargetOps& ops, const std::vector<std::int64_t>& keep) const {
  torch::NoGradGuard no_grad;
  const auto& embed = embed_tokens();
  TORCH_CHECK(input_ids.dim() == 1 && input_ids.scalar_type() == torch::kLong && input_ids.numel() > 0,
              "input_ids must be a non-empty int64 [T], got ", input_ids.sizes(), " ", input_ids.scalar_type());
  TORCH_CHECK(input_ids.device() == embed.device(), "input_ids are on ", input_ids.device(),
              " but the target is on ", embed.device());
  TORCH_CHECK(!keep.empty() && keep.back() <= LastLayer(config_, options_), "layer ", keep.back(),
              " is past the last layer this target holds (", LastLayer(config_, options_), ")");
  const std::int64_t tokens = input_ids.size(0);
  const auto positions = DocumentPositions(cu_seqlens, tokens, embed.device());
  const auto rope = nn::MakeRope(positions, setup::TargetRotaryDim(config_), config_.rope_theta);
  const TargetForwardContext ctx{config_, weights_, cu_seqlens, rope, ops};

  std::vector<torch::Tensor> out;
  std::size_t next = 0;
  TargetDecoderLayers(embed.index_select(0, input_ids), 0, keep.back(), ctx,
                      [&](std::int64_t layer, const torch::Tensor& h) {
                        if (next < keep.size() && layer == keep[next]) {
                          out.push_back(h);
                          ++next;
                        }
                      });
  return out;
}

torch::Tensor TargetModel::Features(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                                    TargetOps& ops) const {
  TORCH_CHECK(!options_.taps.empty(), "TargetModel::Features: the target was loaded without tapped layers");
  return torch::cat(RunLayers(input_ids, cu_seqlens, ops, options_.taps), /*dim=*/1);
}

torch::Tensor TargetModel::Logits(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                                  TargetOps& ops) const {
  TORCH_CHECK(options_.full, "TargetModel::Logits needs a target loaded with full = true");
  torch::NoGradGuard no_grad;
  const auto h = RunLayers(input_ids, cu_seqlens, ops, {config_.num_hidden_layers - 1}).back();
  const auto x = nn::RmsNorm(h, TargetWeight(weights_, TargetFinalNormName(config_)), config_.rms_norm_eps,
                             TargetNormKind(config_));
  return nn::Linear(x, lm_head()).to(torch::kFloat);
}

}  // namespace dflash::trainer
