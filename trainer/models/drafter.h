// Drafter: the DFlash drafter model (spec dflash-training.md §3): its fp32 master weights under the public names,
// their initialisation, the forward over one row's blocks, and saving/loading in the public drafters' layout
// (model.safetensors + config.json as z-lab's DFlashDraftModel writes them).
//   ctx = hidden_norm(fc(features));  h = embed(block_tokens)
//   per layer: x = input_layernorm(h); q = q_norm(q_proj(x)); k = k_norm(k_proj([ctx; x])); v = v_proj([ctx; x]);
//              RoPE (all head dims) on q, k; h += o_proj(DraftAttention(q, k, v, mask)); h += mlp(post_norm(h))
//   out = norm(h)
// The drafter has no embedding or lm_head of its own: the target's frozen ones are passed in.
// Who may call: the training loop, checkpointing, tests. Thread-safety: Forward may run on one thread at a time per
// DrafterOps object; the parameters are shared tensors (the optimizer updates them in place between steps).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "setup/model_config.h"
#include "trainer/ops/ops.h"

namespace dflash::trainer {

class Drafter {
 public:
  // Fresh weights: Linear normal(0, 0.02), RMSNorm weights 1, drawn on `device`, deterministic in seed and the
  // device type (models/init_generator.h: CPU and GPU draws differ). Parameters are fp32 master
  // weights (requires_grad) on `device`; the forward computes in `compute_dtype` (bf16 on a GPU, fp32 or bf16 on
  // the CPU) by casting weights (nn::Linear does that), so gradients land in the fp32 masters.
  // The config goes through ResolveDrafterConfig (drafter_config.h: target_layer_ids derived from num_target_layers
  // when absent, so the feature width is known); an inconsistent config is a TORCH_CHECK failure with its message.
  static std::unique_ptr<Drafter> Create(const setup::DrafterConfig& config, torch::Device device, std::uint64_t seed);

  // Reads `dir`/config.json and `dir`/model.safetensors (or a sharded index) in the public layout; every tensor must
  // be present with its exact shape (any float dtype; converted to fp32 masters). NotFound / InvalidArgument naming
  // the file and tensor otherwise.
  static Result<std::unique_ptr<Drafter>> Load(const std::filesystem::path& dir, torch::Device device);
  // Writes `dir`/model.safetensors (tensors in `dtype`) and `dir`/config.json, each atomically; creates `dir`.
  Status Save(const std::filesystem::path& dir, torch::Dtype dtype = torch::kBFloat16) const;

  const setup::DrafterConfig& config() const { return config_; }
  // Number of target layers tapped (config().target_layer_ids.size()); features are [S, num_taps() * hidden].
  std::int64_t num_taps() const { return static_cast<std::int64_t>(config_.target_layer_ids.size()); }
  // Ordered (name, parameter) list with the public names; the optimizer and checkpoints use it.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const { return params_; }

  // features [S, n_taps * hidden] (context, from the target; no grad), block_tokens int64 [N*B],
  // block_positions int64 [N*B] (data/anchors.h Blocks::position_ids), context_positions int64 [S],
  // mask: ops.h DraftMask without `window` (the drafter sets window per layer from its layer_kinds/sliding_window;
  // its block_size is the config's in training, fewer in decoding's last step, as the public drafter allows),
  // embed [vocab, hidden] the target's frozen embedding. Returns the final-normed hidden states [N*B, hidden] in
  // compute_dtype.
  torch::Tensor Forward(const torch::Tensor& features, const torch::Tensor& block_tokens,
                        const torch::Tensor& block_positions, const torch::Tensor& context_positions,
                        const DraftMask& mask, const torch::Tensor& embed, torch::Dtype compute_dtype,
                        DrafterOps& ops) const;

 private:
  // One parameter of the public layout, in named_parameters() order.
  struct ParamSpec {
    std::string name;
    std::vector<std::int64_t> shape;
    bool is_norm = false;  // an RMSNorm weight (init 1); otherwise a Linear weight (init normal(0, 0.02))
  };
  // Produces the fp32 value of one parameter (on any device); errors abort Build.
  using ParamSource = std::function<Result<torch::Tensor>(const ParamSpec&)>;
  struct Layer {
    torch::Tensor input_layernorm, q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, post_attention_layernorm,
        gate_proj, up_proj, down_proj;
  };

  explicit Drafter(setup::DrafterConfig config) : config_(std::move(config)) {}
  static std::vector<ParamSpec> Layout(const setup::DrafterConfig& config);
  // `config` must come from ResolveDrafterConfig (drafter_config.h).
  static Result<std::unique_ptr<Drafter>> Build(setup::DrafterConfig config, torch::Device device,
                                                const ParamSource& source);

  setup::DrafterConfig config_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;  // the leaves; the handles below share them
  torch::Tensor fc_, hidden_norm_, norm_;
  std::vector<Layer> layers_;
};

}  // namespace dflash::trainer
