// Ops: the hot operations of the target (TargetOps) and the drafter (DrafterOps), behind one interface with two
// backends (a caller that runs one model takes only that model's half).
//   ReferenceOps (reference_ops.h): LibTorch's own operations, on the CPU or a GPU, written straight from the spec
//     (dense masks built from the anchors, the token-by-token or chunked delta rule). The CPU training path, and the
//     oracle the GPU backend is checked against inside the model.
//   CachedKernelOps (cached_kernel_ops.h): the tuned winners of the kernel families (attention_fwd/bwd, gdn,
//     conv1d, rmsnorm, xent) read from the kernel cache through tuner::KernelProvider; GPU only; never compiles or
//     tunes.
// The normalisations (the target's and the drafter's trained ones) and the loss's row-wise pass have default
// implementations here (ops.cc: LibTorch operations, the math of nn/layers.h and of the spec's loss), which the
// reference backends keep and CachedKernelOps replaces by fused kernels.
// All tensors describe ONE row (batch 1; the training step loops over rows). Shapes use T tokens, H heads, D dims.
// Who may call: the models (trainer/models). Thread-safety: one training thread per Ops object.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>

#include "trainer/nn/layers.h"

namespace dflash::trainer {

// The DFlash block masks of one row (spec dflash-training.md §4). KV rows [0, context_len) are the context, rows
// [context_len, context_len + N*B) the N blocks of B rows; query row r belongs to block r / B.
//   full layer   (window == 0): block j sees context kv < anchors[j] and all B rows of its own block;
//   sliding layer (window > 0): context kv >= anchors[j] + (r mod B) - (window - 1) too, and inside the block only
//                               rows <= r mod B;
//   doc_start (packed rows, optional): context also kv >= doc_start[j];
//   invalid blocks (valid[j] == 0) see nothing: output rows 0, zero gradients, never NaN.
struct DraftMask {
  torch::Tensor anchors;    // int32 [N], on the device of q; valid blocks first, ascending
  torch::Tensor valid;      // uint8 [N]
  torch::Tensor doc_start;  // int32 [N], or undefined (one document per row)
  std::int64_t context_len = 0;
  int block_size = 16;
  std::int64_t window = 0;
};

// The target's hot operations (forward only): what the frozen target's layers run.
class TargetOps {
 public:
  virtual ~TargetOps() = default;

  // Target attention, forward only: q [T, Hq, D], k and v [T, Hkv, D]; causal inside each document of cu_seqlens
  // (int32 [docs + 1] on the CPU, 0 ... T; undefined = one document) -> [T, Hq, D].
  virtual torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& cu_seqlens, double scale) = 0;

  // Depthwise causal conv1d (kernel W, no bias) + SiLU, forward only, restarting at every document:
  // x [T, C], weight [C, W] -> [T, C] in x's dtype.
  virtual torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& cu_seqlens) = 0;

  // Gated delta rule forward of the Qwen3.5 layer (spec §1), state 0 at every document start, forward only:
  // q, k [T, H, K], v [T, HV, V] (HV a multiple of H; value head j uses key head j / (HV / H)), a, b [T, HV]
  // (raw gate inputs), A_log and dt_bias [HV] fp32. Inside: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b),
  // q and k L2-normalised (eps 1e-6), q scaled by K^-1/2, fp32 state. -> o [T, HV, V] in v's dtype.
  virtual torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                                       const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) = 0;

  // nn::RmsNorm over the last dim, forward only.
  virtual torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, nn::NormKind kind);
  // The residual add and the norm of its result, forward only: {h + delta (in h's dtype), nn::RmsNorm of that sum}.
  virtual std::pair<torch::Tensor, torch::Tensor> AddRmsNorm(const torch::Tensor& h, const torch::Tensor& delta,
                                                             const torch::Tensor& weight, double eps,
                                                             nn::NormKind kind);
  // nn::GatedRmsNorm (the standard norm times silu(gate), in fp32) over the last dim, in x's dtype, forward only.
  virtual torch::Tensor GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                                     double eps);
  // nn::ApplyRope of x [T, H, D] with rope's tables, forward only.
  virtual torch::Tensor Rope(const torch::Tensor& x, const nn::RopeTables& rope);
  // silu(gate) * up (the MLP's product before down_proj), in gate's dtype, forward only.
  virtual torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up);
};

// The loss's row-wise pass over one chunk of fp32 logits [c, V] (spec §5): per row w * CE (0 for label -100 or
// weight 0), the argmax, and with `with_grad` the logits' gradient grad_scale * w * (softmax - onehot(label)) (zero
// rows where the loss is 0) in `grad_dtype`. DrafterOps::CrossEntropy's default (LibTorch operations).
struct CrossEntropyRows {
  torch::Tensor loss;    // fp32 [c]
  torch::Tensor argmax;  // int64 [c]
  torch::Tensor grad;    // [c, V] in grad_dtype, or undefined without with_grad
};
CrossEntropyRows ReferenceCrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                       const torch::Tensor& weights, double grad_scale, bool with_grad,
                                       torch::Dtype grad_dtype);

// The drafter's hot operations: its attention under the DFlash masks (differentiable), the loss's row-wise pass.
class DrafterOps {
 public:
  virtual ~DrafterOps() = default;

  // Drafter attention, differentiable in q, k, v: q [N*B, Hq, D], k and v [S + N*B, Hkv, D] (Hq a multiple of
  // Hkv; query head h uses KV head h / (Hq / Hkv)) -> [N*B, Hq, D] in q's dtype. softmax(scale q k^T + mask) v.
  virtual torch::Tensor DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const DraftMask& mask, double scale) = 0;

  // nn::RmsNorm (standard kind) over the last dim, differentiable in x and weight: the drafter's trained norms (x
  // in the compute dtype, weight the fp32 master).
  virtual torch::Tensor TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
  // nn::ApplyRope of x [T, H, D] with rope's tables, differentiable in x: the drafter's q and k.
  virtual torch::Tensor TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope);

  // ReferenceCrossEntropy's contract.
  virtual CrossEntropyRows CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                        const torch::Tensor& weights, double grad_scale, bool with_grad,
                                        torch::Dtype grad_dtype);
};

// A backend of both models' operations (one training step runs the target's and the drafter's).
class Ops : public TargetOps, public DrafterOps {
 public:
  virtual std::string name() const = 0;
};

}  // namespace dflash::trainer
