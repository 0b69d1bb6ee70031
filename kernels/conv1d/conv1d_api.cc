#include "kernels/conv1d/conv1d_api.h"

#include <limits>
#include <string>

#include "kernels/conv1d/conv1d_config.h"
#include "kernels/conv1d/conv1d_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::conv1d {
namespace {

Status Invalid(const std::string& what) { return InvalidArgument("conv1d launch: " + what); }

// Finds which of the family's kernels the variant holds (a config is valid for exactly one layout).
Result<std::pair<Geometry, CUfunction>> KernelOf(const tuner::LoadedVariant& winner) {
  for (Layout layout : {Layout::kTokenMajor, Layout::kChannelMajor}) {
    if (!GeometryInvalidReason(winner.config, layout).empty()) continue;
    Result<Geometry> g = GeometryOf(winner.config, layout);
    if (!g.ok()) return g.status();
    const std::string expr = KernelNameExpression(*g);
    if (winner.functions.count(expr) == 0) continue;
    DFLASH_ASSIGN_OR_RETURN(CUfunction f, winner.Function(expr));
    return std::make_pair(*g, f);
  }
  return Invalid("variant " + winner.label + " (config " + tuner::ConfigLabel(winner.config) +
                 ") holds no conv1d kernel for its config");
}

Status CheckArgs(const Conv1dArgs& a) {
  if (a.x == 0 || a.weight == 0 || a.y == 0) return Invalid("x, weight and y must be non-null device pointers");
  if (a.x % 2 || a.weight % 2 || a.y % 2 || a.bias % 2) return Invalid("bf16 pointers must be 2-byte aligned");
  if (a.cu_seqlens % 4) return Invalid("cu_seqlens must be 4-byte aligned");
  if (a.tokens < 0 || a.tokens > kMaxTokens)
    return Invalid("tokens=" + std::to_string(a.tokens) + " outside [0, " + std::to_string(kMaxTokens) + "]");
  if (a.channels < 1 || a.channels > kMaxChannels)
    return Invalid("channels=" + std::to_string(a.channels) + " outside [1, " + std::to_string(kMaxChannels) + "]");
  if (a.num_seqs < 1 || a.num_seqs > std::numeric_limits<int>::max() - 1)
    return Invalid("num_seqs=" + std::to_string(a.num_seqs) + " must be >= 1");
  if (a.cu_seqlens == 0 && a.num_seqs != 1)
    return Invalid("num_seqs=" + std::to_string(a.num_seqs) + " needs cu_seqlens (null means one sequence)");
  if (a.x_stride_t < 1 || a.x_stride_c < 1 || a.y_stride_t < 1 || a.y_stride_c < 1)
    return Invalid("strides must be >= 1 (got x " + std::to_string(a.x_stride_t) + "," +
                   std::to_string(a.x_stride_c) + " y " + std::to_string(a.y_stride_t) + "," +
                   std::to_string(a.y_stride_c) + ")");
  return Status::Ok();
}

// True when every in-bounds VEC-wide access along the unit-stride dimension is aligned: the kernels start
// vectors at multiples of vec along that dimension.
bool VectorOk(CUdeviceptr base, std::int64_t unit_stride, std::int64_t other_stride, int vec) {
  return unit_stride == 1 && other_stride % vec == 0 && base % (2u * static_cast<unsigned>(vec)) == 0;
}

}  // namespace

Conv1dArgs Conv1dArgs::Contiguous(Layout layout, CUdeviceptr x, CUdeviceptr weight, CUdeviceptr y,
                                  std::int64_t tokens, std::int64_t channels) {
  Conv1dArgs a;
  a.x = x;
  a.weight = weight;
  a.y = y;
  a.tokens = tokens;
  a.channels = channels;
  if (layout == Layout::kTokenMajor) {
    a.x_stride_t = a.y_stride_t = channels;
    a.x_stride_c = a.y_stride_c = 1;
  } else {
    a.x_stride_t = a.y_stride_t = 1;
    a.x_stride_c = a.y_stride_c = tokens > 0 ? tokens : 1;
  }
  return a;
}

Status LaunchConv1d(const tuner::LoadedVariant& winner, const Conv1dArgs& args, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(CheckArgs(args));
  DFLASH_ASSIGN_OR_RETURN(auto kernel, KernelOf(winner));
  const auto& [g, function] = kernel;
  if (args.tokens == 0) return Status::Ok();

  dflash_conv1d::Conv1dParams p{};
  p.x = args.x;
  p.weight = args.weight;
  p.bias = args.bias;
  p.y = args.y;
  p.cu_seqlens = args.cu_seqlens;
  p.x_stride_t = args.x_stride_t;
  p.x_stride_c = args.x_stride_c;
  p.y_stride_t = args.y_stride_t;
  p.y_stride_c = args.y_stride_c;
  p.tokens = static_cast<int>(args.tokens);
  p.channels = static_cast<int>(args.channels);
  p.num_seqs = static_cast<int>(args.num_seqs);
  if (g.layout == Layout::kTokenMajor) {
    p.x_vec_ok = VectorOk(args.x, args.x_stride_c, args.x_stride_t, g.vec);
    p.y_vec_ok = VectorOk(args.y, args.y_stride_c, args.y_stride_t, g.vec);
  } else {
    p.x_vec_ok = VectorOk(args.x, args.x_stride_t, args.x_stride_c, g.vec);
    p.y_vec_ok = VectorOk(args.y, args.y_stride_t, args.y_stride_c, g.vec);
  }

  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>((args.tokens + g.block_t - 1) / g.block_t);
  grid.y = static_cast<unsigned>((args.channels + g.block_c - 1) / g.block_c);
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(g.threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::conv1d
