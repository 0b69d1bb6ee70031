#include "kernels/rope/rope_api.h"

#include <string>

#include "kernels/common/row_tensors.h"
#include "kernels/common/variant_function.h"
#include "kernels/rope/rope_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::rope {
namespace {

Status Invalid(const std::string& what) { return InvalidArgument("rope launch: " + what); }

// `bytes` contiguous bytes from `base`, as a footprint of one row.
kernels::Footprint Span(const char* name, CUdeviceptr base, std::int64_t bytes) {
  return {name, static_cast<std::int64_t>(base), 1, bytes, bytes};
}

}  // namespace

ProblemSpec ProblemOf(const RopeArgs& a) { return ProblemSpec{a.tokens, a.heads, a.head_dim, a.rotary_dim}; }

Status CheckRopeArgs(const RopeArgs& a) {
  if (a.x == 0 || a.cos == 0 || a.sin == 0 || a.out == 0)
    return Invalid("x, cos, sin and out must be non-null device pointers");
  if (a.tokens < 0 || a.tokens > kMaxTokens) return Invalid("tokens=" + std::to_string(a.tokens) + " out of range");
  if (a.heads < 1 || a.heads > kMaxHeads) return Invalid("heads=" + std::to_string(a.heads) + " out of range");
  if (a.head_dim < 16 || a.head_dim > kMaxHeadDim || a.head_dim % 8 != 0)
    return Invalid("head_dim=" + std::to_string(a.head_dim) + " must be a multiple of 8 in [16, 1024]");
  if (a.rotary_dim < 16 || a.rotary_dim > a.head_dim || a.rotary_dim % 16 != 0)
    return Invalid("rotary_dim=" + std::to_string(a.rotary_dim) + " must be a multiple of 16 in [16, head_dim]");
  if (a.sign != 1.0f && a.sign != -1.0f) return Invalid("sign must be +1 or -1");
  for (const auto& [name, ptr] : {std::pair<const char*, CUdeviceptr>{"x", a.x}, {"cos", a.cos}, {"sin", a.sin},
                                  {"out", a.out}}) {
    if (ptr % 16 != 0) return Invalid(std::string(name) + " must be 16-byte aligned (read as 16-byte vectors)");
  }
  if (a.x_token_stride % 8 != 0 || a.x_head_stride % 8 != 0 || a.x_token_stride < 0 || a.x_head_stride < 0)
    return Invalid("x strides (" + std::to_string(a.x_token_stride) + ", " + std::to_string(a.x_head_stride) +
                   ") must be >= 0 multiples of 8 elements (16-byte aligned heads)");
  if (a.tokens == 0) return Status::Ok();
  const std::int64_t out_bytes = a.tokens * a.heads * a.head_dim * 2;
  const std::int64_t table_bytes = a.tokens * a.rotary_dim * 4;
  const std::int64_t x_bytes = 2 * ((a.tokens - 1) * a.x_token_stride + (a.heads - 1) * a.x_head_stride + a.head_dim);
  const kernels::Footprint out = Span("out", a.out, out_bytes);
  for (const kernels::Footprint& in : {Span("x", a.x, x_bytes), Span("cos", a.cos, table_bytes),
                                       Span("sin", a.sin, table_bytes)}) {
    if (kernels::Overlap(out, in))
      return Invalid(std::string("out overlaps ") + in.name + " (out may not overlap an input)");
  }
  return Status::Ok();
}

Status LaunchRope(const tuner::LoadedVariant& winner, const RopeArgs& args, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(CheckRopeArgs(args));
  Result<Geometry> g = GeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  const ProblemSpec spec = ProblemOf(args);
  DFLASH_ASSIGN_OR_RETURN(CUfunction function, kernels::VariantFunction(winner, KernelNameExpression(*g, spec),
                                                                        "rope launch", "rope", ToJson(spec).dump()));
  if (args.tokens == 0) return Status::Ok();
  dflash_rope::RopeParams p{};
  p.x = args.x;
  p.cos = args.cos;
  p.sin = args.sin;
  p.out = args.out;
  p.x_token_stride = args.x_token_stride;
  p.x_head_stride = args.x_head_stride;
  p.tokens = static_cast<int>(args.tokens);
  p.heads = static_cast<int>(args.heads);
  p.sign = args.sign;
  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>(GridBlocks(*g, spec));
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(g->threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::rope
