#include "trainer/train/block_loss.h"

namespace dflash::trainer {
namespace {

constexpr std::int64_t kIgnore = -100;  // data::kIgnoreLabel

// hidden rows x lm_head^T in fp32, and the way back. On a GPU with bf16/fp16 hidden and head the product is taken in
// that dtype with an fp32 output (no fp32 copy of the head); otherwise the head is used in fp32 (one copy per call).
class HeadProduct {
 public:
  HeadProduct(const torch::Tensor& lm_head, torch::Dtype hidden_dtype)
      : mixed_(lm_head.is_cuda() && hidden_dtype == lm_head.scalar_type() &&
               (hidden_dtype == torch::kBFloat16 || hidden_dtype == torch::kFloat16)),
        head_(mixed_ ? lm_head.detach() : lm_head.detach().to(torch::kFloat)) {}

  torch::Tensor Logits(const torch::Tensor& hidden_rows) const {  // [c, vocab] fp32
    if (mixed_) return at::mm(hidden_rows, head_.t(), torch::kFloat);
    return at::mm(hidden_rows.to(torch::kFloat), head_.t());
  }
  torch::Tensor Back(const torch::Tensor& grad_logits) const {  // [c, H] fp32
    if (mixed_) return at::mm(grad_logits.to(head_.scalar_type()), head_, torch::kFloat);
    return at::mm(grad_logits, head_);
  }

 private:
  bool mixed_;
  torch::Tensor head_;
};

struct Chunk {
  torch::Tensor valid;   // bool [c]
  torch::Tensor safe;    // int64 [c]: the label, 0 where ignored
  torch::Tensor weight;  // fp32 [c]: w, 0 where ignored
};

Chunk ChunkTargets(const torch::Tensor& labels, const torch::Tensor& weights) {
  Chunk c;
  c.valid = labels != kIgnore;
  c.safe = torch::where(c.valid, labels, torch::zeros_like(labels));
  c.weight = torch::where(c.valid, weights.to(torch::kFloat), torch::zeros_like(weights, torch::kFloat));
  return c;
}

class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& lm_head, const torch::Tensor& labels,
                                                const torch::Tensor& weights, std::int64_t chunk_rows) {
    const HeadProduct head(lm_head, hidden.scalar_type());
    const std::int64_t rows = hidden.size(0);
    auto total = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    auto argmax = torch::empty({rows}, hidden.options().dtype(torch::kLong));
    for (std::int64_t start = 0; start < rows; start += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - start);
      const auto logits = head.Logits(hidden.narrow(0, start, n));
      const Chunk t = ChunkTargets(labels.narrow(0, start, n), weights.narrow(0, start, n));
      const auto ce = torch::logsumexp(logits, -1) - logits.gather(1, t.safe.unsqueeze(1)).squeeze(1);
      // where(): a zero weight must give 0 even if that row's CE is not finite.
      total += torch::where(t.weight != 0, t.weight * ce, torch::zeros_like(ce)).sum();
      argmax.narrow(0, start, n).copy_(logits.argmax(-1));
    }
    ctx->save_for_backward({hidden, lm_head, labels, weights});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->mark_non_differentiable({argmax});
    return {total, argmax};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &lm_head = saved[1], &labels = saved[2], &weights = saved[3];
    const std::int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const auto grad_out = grad_outputs[0].to(torch::kFloat);  // scalar
    const HeadProduct head(lm_head, hidden.scalar_type());
    const std::int64_t rows = hidden.size(0);
    auto grad_hidden = torch::empty_like(hidden);
    for (std::int64_t start = 0; start < rows; start += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - start);
      const Chunk t = ChunkTargets(labels.narrow(0, start, n), weights.narrow(0, start, n));
      auto grad_logits = torch::softmax(head.Logits(hidden.narrow(0, start, n)), -1);
      grad_logits.scatter_add_(1, t.safe.unsqueeze(1), -t.valid.to(torch::kFloat).unsqueeze(1));
      // Zero-weight rows are zeroed outright (softmax of non-finite logits would otherwise leak NaN).
      const auto scale = (t.weight * grad_out).unsqueeze(1);
      grad_logits.mul_(scale).masked_fill_(scale == 0, 0.0);
      grad_hidden.narrow(0, start, n).copy_(head.Back(grad_logits));
    }
    return {grad_hidden, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

BlockLossResult ChunkedBlockLoss(const torch::Tensor& hidden, const torch::Tensor& lm_head,
                                 const torch::Tensor& labels, const torch::Tensor& weights, std::int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && lm_head.dim() == 2 && hidden.size(1) == lm_head.size(1),
              "ChunkedBlockLoss: hidden ", hidden.sizes(), " and lm_head ", lm_head.sizes(),
              " must be [rows, H] and [vocab, H]");
  TORCH_CHECK(hidden.is_floating_point() && lm_head.is_floating_point(),
              "ChunkedBlockLoss: hidden and lm_head must be floating point");
  const std::int64_t rows = hidden.size(0);
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == rows && labels.scalar_type() == torch::kLong,
              "ChunkedBlockLoss: labels must be int64 [", rows, "], got ", labels.scalar_type(), " ", labels.sizes());
  TORCH_CHECK(weights.dim() == 1 && weights.size(0) == rows && weights.scalar_type() == torch::kFloat,
              "ChunkedBlockLoss: weights must be fp32 [", rows, "], got ", weights.scalar_type(), " ",
              weights.sizes());
  TORCH_CHECK(hidden.device() == lm_head.device() && labels.device() == hidden.device() &&
                  weights.device() == hidden.device(),
              "ChunkedBlockLoss: hidden, lm_head, labels and weights must be on one device");
  TORCH_CHECK(chunk_rows > 0, "ChunkedBlockLoss: chunk_rows must be positive, got ", chunk_rows);
  const std::int64_t vocab = lm_head.size(0);
  TORCH_CHECK(((labels == kIgnore) | ((labels >= 0) & (labels < vocab))).all().item<bool>(),
              "ChunkedBlockLoss: a label is outside [0, ", vocab, ") and not -100");
  auto out = ChunkedCrossEntropy::apply(hidden, lm_head, labels, weights, chunk_rows);
  return {out[0], out[1]};
}

}  // namespace dflash::trainer
