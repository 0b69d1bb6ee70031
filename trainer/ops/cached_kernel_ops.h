// CachedKernelOps: the Ops interface (ops.h) on CUDA tensors through the tuned winners of the kernel families
// (attention_fwd / attention_bwd, conv1d, gdn, rmsnorm / rmsnorm_bwd, rope, swiglu, xent), read from a kernel cache through tuner::KernelProvider. It never
// compiles or tunes on its own: a missing key is NotFound naming the exact `dflash-tune warmup` command; Prepare()
// resolves every key of a run before the first step, and TuneMissing() (dflash-train --tune-missing) tunes the
// missing ones through tuner::Tuner. Kernels run on torch's current CUDA stream in the device's primary context
// (the one LibTorch uses), on the tensors' own memory; workspaces are torch allocations on that stream.
// Inputs: bf16 CUDA tensors on the ops' device (fp32 A_log / dt_bias), head_dim 64/128/256 (backward 64/128), gdn
// key/value dims 128, conv kernel width 4; every problem is launched with batch 1 (one row).
// Packed rows: a DraftMask with doc_start (per-block document starts) runs the packed-rows variant of the drafter
// attention (problem doc_bound, a key of its own; the training setup lists it for --rows pack), forward and backward.
// Needs LibTorch's CUDA backend (-DDFLASH_TORCH_CUDA=ON); without it Create() fails with Unsupported.
// The drafter attention's two halves (DraftAttentionForward / DraftAttentionBackward) serve callers that own the
// autograd themselves (the Python package's operators, python/); SetTuneOnMiss makes a launch whose key is missing
// tune it in place (single flight across processes) instead of failing.
// Who may call: the models through Ops, the training setup (Create, Prepare, TuneMissing), the Python package's
// operators. Thread-safety: one thread at a time per object (as Ops); the cache and provider underneath are
// thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"
#include "base/status.h"
#include "setup/kernel_requests.h"
#include "trainer/ops/ops.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_provider.h"
#include "tuner/tuner.h"

namespace dflash::trainer {

// Provenance of one tuned kernel a run uses (logged with the run / checkpoint).
struct KernelUse {
  std::string operation;  // "draft_attention backward", ...
  std::string family;
  std::string key_digest;
  std::string config;
  double tuned_ms = 0.0;
  std::string cubin_sha256;
};

class CachedKernelOps final : public Ops {
 public:
  // The ops on CUDA device `device` over `cache` (which must outlive the object). Unsupported without LibTorch's
  // CUDA backend or without a CUDA device.
  static Result<std::unique_ptr<CachedKernelOps>> Create(cache::KernelCache& cache, int device = 0);
  ~CachedKernelOps() override;

  // Resolves (loads) every kernel of `requests` (setup::KernelRequestsFor of the run's setup); the provenance rows,
  // one per distinct key. NotFound listing ALL missing keys, each with its exact warmup command.
  Result<std::vector<KernelUse>> Prepare(const std::vector<setup::KernelRequest>& requests);
  // Tunes the keys of `requests` that are missing from the cache (single flight across processes), then Prepare().
  // options.arch defaults to this device's arch. With `log`, one line per key as it starts and ends (flushed: a
  // cold start tunes for minutes).
  Result<std::vector<KernelUse>> TuneMissing(const std::vector<setup::KernelRequest>& requests,
                                             tuner::TuneOptions options, std::ostream* log = nullptr);

  // From now on a launch whose key is missing tunes it first (options.arch defaults to this device's arch);
  // nullopt restores the default, a missing key is a c10::Error naming its warmup command.
  void SetTuneOnMiss(std::optional<tuner::TuneOptions> options);

  std::string name() const override { return "cached_kernels"; }
  const gpu::DeviceInfo& device_info() const;

  torch::Tensor DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const DraftMask& mask, double scale) override;
  // DraftAttention's forward alone: {o [N*B, Hq, D], lse fp32 [1, Hq, N*B]} (no autograd), and its backward:
  // {dq, dk, dv} from dout and the forward's o and lse.
  std::pair<torch::Tensor, torch::Tensor> DraftAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                                                const torch::Tensor& v, const DraftMask& mask,
                                                                double scale);
  std::array<torch::Tensor, 3> DraftAttentionBackward(const torch::Tensor& dout, const torch::Tensor& q,
                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                      const torch::Tensor& o, const torch::Tensor& lse,
                                                      const DraftMask& mask, double scale);
  torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& cu_seqlens, double scale) override;
  torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& cu_seqlens) override;
  torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                               const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) override;
  // The gated delta rule in every form the gdn family serves (the Python package's operators;
  // GatedDeltaRule above is its trainer form): the gates raw (a, b bf16 [T, HV], A_log, dt_bias fp32 [HV]) or
  // precomputed (g = log decay and beta [T, HV], any float dtype: flash-linear-attention's form), q and k
  // L2-normalised in the kernels or used as given, scale (0: 128^-1/2), initial states [N, HV, 128 (K), 128 (V)]
  // (any float dtype) or undefined (zeros), final states wanted or not. The cache key is the trainer form's: one
  // winner serves every form. -> {o [T, HV, 128] bf16, final states fp32 [N, HV, 128, 128] or undefined}.
  struct GdnGates {
    torch::Tensor a, b, A_log, dt_bias;  // the raw form, or all undefined
    torch::Tensor g, beta;               // the precomputed form, or both undefined
  };
  struct GdnForm {
    bool qk_l2norm = true;
    double scale = 0.0;
    torch::Tensor initial_state;
    bool final_state = false;
  };
  std::pair<torch::Tensor, torch::Tensor> GatedDeltaRuleWith(const torch::Tensor& q, const torch::Tensor& k,
                                                             const torch::Tensor& v, const GdnGates& gates,
                                                             const torch::Tensor& cu_seqlens, const GdnForm& form);
  // The rmsnorm family (bf16 inputs; bf16 or fp32 weights; rows addressed by one stride, else copied).
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, nn::NormKind kind) override;
  std::pair<torch::Tensor, torch::Tensor> AddRmsNorm(const torch::Tensor& h, const torch::Tensor& delta,
                                                     const torch::Tensor& weight, double eps,
                                                     nn::NormKind kind) override;
  torch::Tensor GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& gate,
                             double eps) override;
  // The drafter's trained norms: forward the rmsnorm winner, backward the rmsnorm_bwd winner (dx, and dw as the
  // column sums of its partial rows), on bf16 x with an fp32 or bf16 weight; any other dtype, or rows wider than
  // the backward serves (rmsnorm::BwdServes), run the LibTorch default (DrafterOps::TrainedRmsNorm).
  torch::Tensor TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) override;
  // The rope family on bf16 x [T, H, D] (heads addressed by token and head strides, else copied) with fp32 tables;
  // TrainedRope's backward is the same kernel rotating dy by -theta. Dims rope::Supported does not serve, or other
  // dtypes, run the LibTorch default.
  torch::Tensor Rope(const torch::Tensor& x, const nn::RopeTables& rope) override;
  torch::Tensor TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope) override;
  // The swiglu family on bf16 gate / up (rows of one stride each, else copied); other dtypes or widths run the
  // LibTorch default.
  torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) override;
  // The xent family for fp32 logits with a bf16 gradient (what training asks for); any other request runs the
  // LibTorch default (ReferenceCrossEntropy).
  CrossEntropyRows CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& weights,
                                double grad_scale, bool with_grad, torch::Dtype grad_dtype) override;

  struct State;  // defined in cached_kernel_ops.cc (also used by the attention autograd function there)

 private:
  explicit CachedKernelOps(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace dflash::trainer
