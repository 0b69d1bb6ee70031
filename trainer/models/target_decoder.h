// TargetDecoder: token-by-token (and block-by-block) decoding of a TargetModel with carried state, for speculative
// decoding evaluation (spec dflash-training.md §7) and greedy data generation. It runs the model's own decoder
// layers (target_layers.h) through a private stateful TargetOps, so the math is the model's: per gated-delta-net layer
// the conv state (the last W-1 qkv inputs) and the fp32 recurrent state [HV, K, V] (gated_delta_chunk.h), per full
// attention layer the K/V cache (after norms and RoPE). A batch of sequences advances in lockstep (all the same
// length): one speculative stream uses batch 1, data generation many.
// Extend(tokens) consumes the tokens at positions length() ... and returns per token the fp32 logits and the tapped
// layers' outputs (the features, exactly as TargetModel::Features defines them). Rolling back:
//   Save() / Restore(): a snapshot of the whole state; cheap (state tensors are never modified in place, so a
//     snapshot shares them);
//   Truncate(n): back to n tokens anywhere inside the last Extend that was asked to keep_rollback (speculative
//     decoding keeps the accepted prefix of a verified block without re-running it).
// Plain LibTorch on the model's device, no autograd. Requires a model loaded with options.full.
// Who may call: trainer/train (speculative decoding, synthetic data) and tests. Thread-safety: one thread per
// decoder; the model is shared read-only, so several decoders may run concurrently.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "trainer/models/gated_delta_chunk.h"
#include "trainer/models/target_model.h"

namespace dflash::trainer {

struct DecodeOutput {
  torch::Tensor logits;    // fp32 [batch, T, vocab]        ([T, vocab] when Extend got 1-D tokens)
  torch::Tensor features;  // [batch, T, n_taps * hidden]   ([T, ...] likewise), in the model's dtype
};

class TargetDecoder {
 private:
  struct LayerState {
    torch::Tensor k, v;       // full attention: [batch, length, Hkv, D]
    torch::Tensor conv;       // gated delta net: [batch, W - 1, conv channels], the last W - 1 inputs
    torch::Tensor recurrent;  // gated delta net: fp32 [batch, HV, K, V]
  };

 public:
  // The whole decoding state at one moment (shares the state tensors; taking and keeping one is cheap).
  class Snapshot {
   public:
    std::int64_t length() const { return length_; }

   private:
    friend class TargetDecoder;
    std::int64_t length_ = 0;
    std::int64_t batch_ = 0;
    std::vector<LayerState> layers_;
  };

  // An empty state (length 0) for `batch` sequences. TORCH_CHECKs that the model holds every layer (options.full).
  explicit TargetDecoder(const TargetModel& model, std::int64_t batch = 1);

  std::int64_t batch() const { return batch_; }
  std::int64_t length() const { return length_; }

  // tokens int64 [batch, T] (or [T] when batch is 1), T >= 1, on any device. keep_rollback: remember what
  // Truncate needs to go back into this call (costs O(T) extra memory per layer; the previous record is dropped).
  DecodeOutput Extend(const torch::Tensor& tokens, bool keep_rollback = false);
  // One token per sequence: int64 [batch]. Outputs [batch, vocab] and [batch, n_taps * hidden].
  DecodeOutput Step(const torch::Tensor& tokens);

  Snapshot Save() const;
  void Restore(const Snapshot& snapshot);  // also drops the rollback record
  // Back to n tokens; n must lie within the last Extend made with keep_rollback: start <= n <= length().
  void Truncate(std::int64_t n);

 private:
  class LayerOps;  // the stateful TargetOps the model's layers run through (target_decoder.cc)
  struct LayerRollback {
    torch::Tensor conv_inputs;  // [batch, W - 1 + T, C]: the conv state before the call, then the call's inputs
    GatedDeltaTrace trace;
  };

  const TargetModel& model_;
  std::int64_t batch_ = 1;
  std::int64_t length_ = 0;
  std::vector<LayerState> layers_;
  std::int64_t rollback_start_ = -1;  // length before the recorded Extend; -1: none
  std::vector<LayerRollback> rollback_;
};

}  // namespace dflash::trainer
