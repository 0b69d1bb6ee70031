// ChunkedBlockLoss: the DFlash loss of spec dflash-training.md §5 through the target's frozen lm_head, without ever
// holding all logits. Rows (the drafter's output rows, N*B per sample) are processed chunk_rows at a time, each chunk
// once: logits = hidden_chunk @ lm_head^T in fp32; the row-wise pass (DrafterOps::CrossEntropy: the cached xent
// kernel on a GPU, LibTorch operations otherwise) gives sum_i w_i * CE_i (accumulated in fp32), the argmax per row
// and, when hidden needs a gradient, grad_logits = (softmax - onehot(label)) * w; grad_hidden = grad_logits @ lm_head
// is formed in the forward and kept ([rows, H] in hidden's dtype), and the backward scales it by the upstream
// gradient. The peak is one chunk of [chunk_rows, vocab] fp32 logits and its gradient (about 2 GB + 1 GB at 2048
// rows x 248320 in bf16).
// Rows with label -100 (data::kIgnoreLabel) or weight 0 contribute nothing and get zero gradient. lm_head gets no
// gradient. The sum is NOT normalised: the training loop divides by the global sum of weights.
// Who may call: the training step and tests. Thread-safety: pure function of its inputs.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "trainer/ops/ops.h"

namespace dflash::trainer {

struct BlockLossResult {
  torch::Tensor weighted_ce_sum;  // scalar fp32, differentiable w.r.t. hidden: sum_i w_i * CE_i (NOT normalised)
  torch::Tensor argmax;           // int64 [rows], no grad
};

// hidden [rows, H] (any float dtype, on the device of lm_head), lm_head [vocab, H] (frozen), labels int64 [rows]
// (-100 ignored; others in [0, vocab)), weights fp32 [rows]. TORCH_CHECK on shapes, devices and labels out of range.
// `ops`: the backend of the row-wise pass (null: ReferenceCrossEntropy).
BlockLossResult ChunkedBlockLoss(const torch::Tensor& hidden, const torch::Tensor& lm_head,
                                 const torch::Tensor& labels /*int64 [rows], -100 ignored*/,
                                 const torch::Tensor& weights /*fp32 [rows]*/, std::int64_t chunk_rows = 2048,
                                 DrafterOps* ops = nullptr);

}  // namespace dflash::trainer
