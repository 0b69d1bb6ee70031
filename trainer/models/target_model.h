// TargetModel: the frozen target of spec dflash-training.md §1-§2, forward only, in LibTorch: the Qwen3.5/3.6 hybrid
// (gated delta net + gated full attention layers, zero-centred RMSNorms) and plain Qwen3 dense. It owns the target's
// weights (as named by the Hugging Face checkpoint), loads them from an HF folder reading only what is needed
// (checkpoint/target_tensors.h), saves them back in the HF layout, and computes the tapped-layer features the drafter
// trains on (and, when loaded in full, the logits for decoding / evaluation). Every forward runs without autograd.
// Who may call: the trainer (feature extraction, decoding eval) and tests.
// Thread-safety: after construction the model is immutable; const methods may run concurrently, each with its own
// TargetOps.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "setup/model_config.h"
#include "trainer/ops/ops.h"

namespace dflash::trainer {

struct TargetLoadOptions {
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kBFloat16;  // weights and activations
  bool full = false;                       // false: only layers up to the last tap (features); true: all layers,
                                           // final norm and lm_head too (decoding / eval)
  std::vector<std::int64_t> taps;          // tapped layer indices (spec §2), ascending
};

class TargetModel {
 public:
  // From a Hugging Face model directory (config.json + model.safetensors or sharded index), reading only the
  // tensors needed (checkpoint/target_tensors.h). Errors name the missing/mis-shaped tensor and the file.
  static Result<std::unique_ptr<TargetModel>> Load(const std::filesystem::path& dir, const TargetLoadOptions& options);
  // Random weights (the tiny preset): Linear weights normal(0, init_std), norms at their neutral value (0 for
  // zero-centred, 1 for standard), A_log = log(uniform(1, 16)), dt_bias per HF init; deterministic in seed and the
  // device type. Drawn on options.device: on a GPU (full-size benchmark targets) with CUDA generators, so the values
  // differ from a CPU draw of the same seed.
  // TORCH_CHECKs the config and taps.
  static std::unique_ptr<TargetModel> RandomInit(const setup::TargetConfig& config, const TargetLoadOptions& options,
                                                 std::uint64_t seed, double init_std = 0.02);
  // From weights already in memory (HF names; tests, conversions): every tensor the options need must be present
  // with its exact shape (extra ones are ignored); each is converted to its storage dtype on options.device.
  // InvalidArgument naming the tensor otherwise, or for bad taps.
  static Result<std::unique_ptr<TargetModel>> FromWeights(const setup::TargetConfig& config,
                                                          const TargetLoadOptions& options,
                                                          const std::map<std::string, torch::Tensor>& weights);
  // Writes config.json + model.safetensors in the HF layout and names (so Load reads it back bit-exactly).
  // Only the weights this model holds are written (a model loaded with full = false lacks the later layers).
  Status SaveHf(const std::filesystem::path& dir) const;

  const setup::TargetConfig& config() const { return config_; }
  const std::vector<std::int64_t>& taps() const { return options_.taps; }
  const TargetLoadOptions& options() const { return options_; }

  // input_ids int64 [T] on the model's device; cu_seqlens int32 [docs + 1] on the CPU (undefined: one document).
  // Features: residual-stream outputs of the tapped layers concatenated in tap order: [T, taps.size() * hidden].
  // Layers after the last tap are not run.
  torch::Tensor Features(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens, TargetOps& ops) const;
  // All layers, final norm, lm_head: [T, vocab] logits (fp32). Requires options.full.
  torch::Tensor Logits(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens, TargetOps& ops) const;

  const torch::Tensor& embed_tokens() const;  // [vocab, hidden], frozen
  const torch::Tensor& lm_head() const;       // [vocab, hidden], frozen (the embedding when tied)

  // Every weight held, by its HF name.
  const std::map<std::string, torch::Tensor>& weights() const { return weights_; }

 private:
  TargetModel(setup::TargetConfig config, TargetLoadOptions options, std::map<std::string, torch::Tensor> weights);
  // Runs layers 0..keep.back() and returns the residual-stream outputs of the layers in `keep` (ascending).
  std::vector<torch::Tensor> RunLayers(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                                       TargetOps& ops, const std::vector<std::int64_t>& keep) const;

  setup::TargetConfig config_;
  TargetLoadOptions options_;
  std::map<std::string, torch::Tensor> weights_;
};

}  // namespace dflash::trainer
