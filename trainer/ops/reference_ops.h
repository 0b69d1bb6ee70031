// ReferenceOps: the Ops interface (ops.h) written straight from the spec with LibTorch's own operations, on the
// CPU or a GPU (whatever device the inputs are on). Dense boolean masks, softmax in fp32, the gated delta rule token
// by token with an fp32 state. Exact and simple rather than fast: the CPU training path, and the oracle the cached
// kernels are checked against. DraftAttention is differentiable through autograd; rows that see nothing (invalid
// blocks) give output 0 and zero gradients, never NaN. Also exports the dense draft mask for tests.
// Who may call: the models (trainer/models) and tests. Thread-safety: stateless; any thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "trainer/ops/ops.h"

namespace dflash::trainer {

// The boolean mask [rows, context_len + rows] of `mask` (true = query row may see the kv row), rows = N * B query
// rows (checked against the mask's anchors), on the device of mask.anchors. Exactly the rules of ops.h / spec §4,
// including doc_start and invalid blocks (all-false rows).
torch::Tensor DraftMaskDense(const DraftMask& mask, std::int64_t rows);

// The boolean doc-causal mask [T, T] of cu_seqlens (int32 [docs + 1] on the CPU, or undefined = one document) on
// `device`: row t sees kv rows of its own document at positions <= t.
torch::Tensor CausalMaskDense(const torch::Tensor& cu_seqlens, std::int64_t tokens, const torch::Device& device);

std::unique_ptr<Ops> MakeReferenceOps();

}  // namespace dflash::trainer
