// Functional building blocks shared by the target and the drafter (spec dflash-training.md §1, §3): norms, linear
// layers, rotary embeddings, the SwiGLU MLP. Plain functions of tensors, differentiable with autograd.
// Precision: norms compute in fp32 and return the input's dtype; Linear multiplies in the input's dtype (the weight,
// e.g. an fp32 master weight, is cast to it, so gradients still reach the master weight).
// Who may call: trainer/models. Thread-safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace dflash::trainer::nn {

enum class NormKind {
  kStandard,     // w * x / rms(x)          (Qwen3, the drafter, Qwen3.5's gated norm; w initialised to 1)
  kZeroCentred,  // (1 + w) * x / rms(x)    (Qwen3.5's RMSNorms; w initialised to 0)
};

// RMS norm over the last dimension: x * rsqrt(mean(x^2) + eps) scaled per kind.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, NormKind kind);

// Qwen3.5's gated RMSNorm of the delta-net output: RmsNorm(x, weight, kStandard) * silu(gate), in fp32.
torch::Tensor GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                           double eps);

// x @ weight^T (weight [out, in]) in x's dtype.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight);

// down(silu(gate(x)) * up(x)).
torch::Tensor SwiGluMlp(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& up_weight,
                        const torch::Tensor& down_weight);

// Rotary embedding tables for integer positions [T]: cos and sin [T, rotary_dim] (fp32, the HF layout: the
// rotary_dim / 2 frequencies theta^(-2i / rotary_dim) repeated twice).
struct RopeTables {
  torch::Tensor cos, sin;
  std::int64_t rotary_dim = 0;
};
RopeTables MakeRope(const torch::Tensor& positions, std::int64_t rotary_dim, double theta);

// Applies the rotation (rotate_half convention) to the first rotary_dim dims of x [T, H, D] (partial RoPE when
// rotary_dim < D); the other dims pass through. Returns x's dtype.
torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope);

}  // namespace dflash::trainer::nn
