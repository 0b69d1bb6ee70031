// The decoder layers of the frozen target (spec dflash-training.md §1), forward only, as functions of the hidden
// state and the target's weights under their Hugging Face names:
//   hybrid (Qwen3.5/3.6): zero-centred RMSNorms; gated delta net layers (in_proj_qkv [q | k | v] -> depthwise causal
//     conv1d + SiLU -> gated delta rule -> gated RMSNorm with silu(in_proj_z) -> out_proj) and gated full attention
//     layers (q_proj per head [query | gate], zero-centred q/k norms, partial RoPE, causal attention,
//     * sigmoid(gate), o_proj);
//   dense (Qwen3): standard RMSNorms, q/k norms, full RoPE, causal attention.
// Every layer: h + mixer(input_layernorm(h)), then h + SwiGLU(post_attention_layernorm(h)).
// The hot operations go through TargetOps (attention, conv1d, delta rule, the norms), restarting at every document of
// cu_seqlens. Who may call: target_model.cc, target_decoder.cc and tests. Thread-safety: pure functions (TargetOps
// per thread, see ops.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "setup/model_config.h"
#include "trainer/nn/layers.h"
#include "trainer/ops/ops.h"

namespace dflash::trainer {

using TargetWeights = std::map<std::string, torch::Tensor>;

// What every layer of one forward shares.
struct TargetForwardContext {
  const setup::TargetConfig& config;
  const TargetWeights& weights;
  const torch::Tensor& cu_seqlens;  // int32 [docs + 1] on the CPU, or undefined (one document)
  const nn::RopeTables& rope;       // of the document positions, rotary_dim = setup::TargetRotaryDim(config)
  TargetOps& ops;
};

// The weight `name`; TORCH_CHECK names it when absent.
const torch::Tensor& TargetWeight(const TargetWeights& weights, const std::string& name);

// Zero-centred for the Qwen3.5 hybrid, standard for Qwen3 dense (every RMSNorm but the delta net's gated one).
nn::NormKind TargetNormKind(const setup::TargetConfig& config);

// Token positions restarting at 0 at every document of cu_seqlens: int64 [tokens] on `device`.
// TORCH_CHECKs cu_seqlens (int32, CPU, 1-D, starts at 0, non-decreasing, ends at tokens).
torch::Tensor DocumentPositions(const torch::Tensor& cu_seqlens, std::int64_t tokens, const torch::Device& device);

// Decoder layer `layer` on h [T, hidden] -> [T, hidden] in h's dtype.
torch::Tensor TargetDecoderLayer(const torch::Tensor& h, std::int64_t layer, const TargetForwardContext& ctx);

// Layers first..last (inclusive) on h with the residual adds fused into the next norm (TargetOps::AddRmsNorm): the
// same math as TargetDecoderLayer applied in turn. `on_output(layer, h)` receives each layer's output.
torch::Tensor TargetDecoderLayers(torch::Tensor h, std::int64_t first, std::int64_t last,
                                  const TargetForwardContext& ctx,
                                  const std::function<void(std::int64_t, const torch::Tensor&)>& on_output);

// The token mixers on the normed input x [T, hidden] -> [T, hidden]; `prefix` ends with "linear_attn." /
// "self_attn.".
torch::Tensor TargetGatedDeltaNet(const torch::Tensor& x, const std::string& prefix, const TargetForwardContext& ctx);
torch::Tensor TargetFullAttention(const torch::Tensor& x, const std::string& prefix, const TargetForwardContext& ctx);

}  // namespace dflash::trainer
