#include "trainer/train/block_loss.h"

#include <algorithm>

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
  // The dtype the row-wise pass writes the logits' gradient in: the head's for the mixed product, else fp32.
  torch::Dtype GradLogitsDtype() const { return mixed_ ? head_.scalar_type() : torch::kFloat; }
  torch::Tensor Back(const torch::Tensor& grad_logits) const {  // [c, H] fp32
    if (mixed_) return at::mm(grad_logits.to(head_.scalar_type()), head_, torch::kFloat);
    return at::mm(grad_logits, head_);
  }

 private:
  bool mixed_;
  torch::Tensor head_;
};

// Forward = each chunk's logits (one product with the head), its row-wise pass (ops: w * CE, argmax, and when the
// hidden states need a gradient, the logits' gradient), and that gradient back through the head into grad_hidden,
// chunk by chunk: the backward only scales the saved grad_hidden by the upstream gradient (the loss is linear in
// it), so the logits are made once per step, not again in the backward.
class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& lm_head, const torch::Tensor& labels,
                                                const torch::Tensor& weights, std::int64_t chunk_rows,
                                                bool with_grad, std::int64_t ops_address) {
    DrafterOps* ops = reinterpret_cast<DrafterOps*>(ops_address);
    const HeadProduct head(lm_head, hidden.scalar_type());
    const std::int64_t rows = hidden.size(0);
    auto total = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    auto argmax = torch::empty({rows}, hidden.options().dtype(torch::kLong));
    torch::Tensor grad_hidden = with_grad ? torch::empty_like(hidden) : torch::Tensor();
    const torch::Dtype grad_dtype = head.GradLogitsDtype();
    for (std::int64_t start = 0; start < rows; start += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - start);
      const auto logits = head.Logits(hidden.narrow(0, start, n));
      const auto l = labels.narrow(0, start, n), w = weights.narrow(0, start, n);
      const CrossEntropyRows r = ops ? ops->CrossEntropy(logits, l, w, 1.0, with_grad, grad_dtype)
                                     : ReferenceCrossEntropy(logits, l, w, 1.0, with_grad, grad_dtype);
      total += r.loss.sum();
      argmax.narrow(0, start, n).copy_(r.argmax);
      if (with_grad) grad_hidden.narrow(0, start, n).copy_(head.Back(r.grad));
    }
    ctx->save_for_backward({grad_hidden});
    ctx->mark_non_differentiable({argmax});
    return {total, argmax};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto grad_hidden = ctx->get_saved_variables()[0];
    TORCH_CHECK(grad_hidden.defined(), "ChunkedBlockLoss: backward of a loss computed without its gradient");
    const auto grad_out = grad_outputs[0].to(torch::kFloat);  // scalar
    return {grad_hidden * grad_out.to(grad_hidden.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

BlockLossResult ChunkedBlockLoss(const torch::Tensor& hidden, const torch::Tensor& lm_head,
                                 const torch::Tensor& labels, const torch::Tensor& weights, std::int64_t chunk_rows,
                                 DrafterOps* ops) {
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
  const bool with_grad = torch::GradMode::is_enabled() && hidden.requires_grad();
  auto out = ChunkedCrossEntropy::apply(hidden, lm_head, labels, weights, chunk_rows, with_grad,
                                        reinterpret_cast<std::int64_t>(ops));
  return {out[0], out[1]};
}

}  // namespace dflash::trainer
