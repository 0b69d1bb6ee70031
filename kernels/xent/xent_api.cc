#include "kernels/xent/xent_api.h"

#include <cmath>
#include <string>

#include "kernels/xent/xent_config.h"
#include "kernels/xent/xent_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::xent {
namespace {

constexpr std::int64_t kMaxRowStride = std::int64_t{1} << 40;

Status Invalid(const std::string& what) { return InvalidArgument("xent launch: " + what); }

struct Kernel {
  Geometry geometry;
  bool grad = false;
  CUfunction function = nullptr;
};

// Finds the variant's kernel: the expression of its config with or without the gradient.
Result<Kernel> KernelOf(const tuner::LoadedVariant& winner) {
  Result<Geometry> g = GeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  for (bool grad : {true, false}) {
    const std::string expr = KernelNameExpression(*g, grad);
    if (winner.functions.count(expr) == 0) continue;
    DFLASH_ASSIGN_OR_RETURN(CUfunction f, winner.Function(expr));
    return Kernel{*g, grad, f};
  }
  return Invalid("variant " + winner.label + " (config " + tuner::ConfigLabel(winner.config) +
                 ") holds no xent kernel for its config");
}

// Bytes from the first element of row 0 to one past the last element of the last row.
std::uint64_t Extent(std::int64_t rows, std::int64_t stride, std::int64_t vocab, std::int64_t element_bytes) {
  return static_cast<std::uint64_t>(((rows - 1) * stride + vocab) * element_bytes);
}

Status CheckArgs(const XentArgs& a) {
  if (a.logits == 0 || a.labels == 0 || a.weights == 0 || a.loss == 0 || a.argmax == 0)
    return Invalid("logits, labels, weights, loss and argmax must be non-null device pointers");
  if (a.rows < 0 || a.rows > kMaxRows)
    return Invalid("rows=" + std::to_string(a.rows) + " outside [0, " + std::to_string(kMaxRows) + "]");
  if (a.vocab < 1 || a.vocab > kMaxVocab)
    return Invalid("vocab=" + std::to_string(a.vocab) + " outside [1, " + std::to_string(kMaxVocab) + "]");
  if (a.logits % 16 != 0) return Invalid("logits must be 16-byte aligned");
  if (a.row_stride < a.vocab || a.row_stride > kMaxRowStride || a.row_stride % 4 != 0)
    return Invalid("row_stride=" + std::to_string(a.row_stride) + " must be >= vocab=" + std::to_string(a.vocab) +
                   " and a multiple of 4 (16-byte aligned rows)");
  if (a.labels % 8 != 0 || a.argmax % 8 != 0) return Invalid("labels and argmax (int64) must be 8-byte aligned");
  if (a.weights % 4 != 0 || a.loss % 4 != 0) return Invalid("weights and loss (fp32) must be 4-byte aligned");
  if (!std::isfinite(a.grad_scale)) return Invalid("grad_scale must be finite");
  if (a.grad != 0) {
    if (a.grad % 8 != 0) return Invalid("grad must be 8-byte aligned");
    if (a.grad_row_stride < a.vocab || a.grad_row_stride > kMaxRowStride || a.grad_row_stride % 4 != 0)
      return Invalid("grad_row_stride=" + std::to_string(a.grad_row_stride) +
                     " must be >= vocab=" + std::to_string(a.vocab) + " and a multiple of 4 (8-byte aligned rows)");
    if (a.rows > 0) {
      const std::uint64_t lb = a.logits, le = lb + Extent(a.rows, a.row_stride, a.vocab, 4);
      const std::uint64_t gb = a.grad, ge = gb + Extent(a.rows, a.grad_row_stride, a.vocab, 2);
      if (lb < ge && gb < le) return Invalid("grad overlaps the logits (the kernel reads logits after writing grad)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status LaunchXent(const tuner::LoadedVariant& winner, const XentArgs& args, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(CheckArgs(args));
  DFLASH_ASSIGN_OR_RETURN(Kernel kernel, KernelOf(winner));
  if (kernel.grad && args.grad == 0)
    return Invalid("variant " + winner.label + " writes the gradient (a \"grad\": true bucket): grad must be non-null");
  if (!kernel.grad && args.grad != 0)
    return Invalid("variant " + winner.label + " writes no gradient (a \"grad\": false bucket): grad must be 0");
  if (args.rows == 0) return Status::Ok();

  dflash_xent::XentParams p{};
  p.logits = args.logits;
  p.labels = args.labels;
  p.weights = args.weights;
  p.loss = args.loss;
  p.argmax = args.argmax;
  p.grad = args.grad;
  p.row_stride = args.row_stride;
  p.grad_row_stride = args.grad_row_stride;
  p.rows = static_cast<int>(args.rows);
  p.vocab = static_cast<int>(args.vocab);
  p.grad_scale = args.grad_scale;

  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>(args.rows * kernel.geometry.split);
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(kernel.geometry.threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(kernel.function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::xent
