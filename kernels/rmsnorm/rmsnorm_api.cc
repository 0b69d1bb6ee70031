#include "kernels/rmsnorm/rmsnorm_api.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/row_tensors.h"
#include "kernels/common/variant_function.h"
#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::rmsnorm {
namespace {

using kernels::CheckRowTensor;
using kernels::Footprint;
using kernels::Overlap;

Status Invalid(const std::string& what) { return InvalidArgument("rmsnorm launch: " + what); }

Status CheckTensor(const char* name, CUdeviceptr ptr, std::int64_t stride, std::int64_t cols) {
  return CheckRowTensor("rmsnorm launch", name, ptr, stride, cols);
}

Footprint RowsOf(const char* name, CUdeviceptr ptr, std::int64_t stride, const RmsNormArgs& a) {
  return {name, static_cast<std::int64_t>(ptr), a.rows, 2 * a.cols, 2 * stride};
}

}  // namespace

RmsNormArgs RmsNormArgs::Contiguous(CUdeviceptr x, CUdeviceptr weight, CUdeviceptr out, std::int64_t rows,
                                    std::int64_t cols, Kind kind, WeightDtype weight_dtype, float eps) {
  RmsNormArgs a;
  a.x = x;
  a.weight = weight;
  a.out = out;
  a.x_stride = a.out_stride = cols;
  a.rows = rows;
  a.cols = cols;
  a.kind = kind;
  a.weight_dtype = weight_dtype;
  a.eps = eps;
  return a;
}

ProblemSpec ProblemOf(const RmsNormArgs& args) {
  return ProblemSpec{args.rows, args.cols, args.kind, args.residual != 0, args.gate != 0, args.weight_dtype};
}

Status CheckRmsNormArgs(const RmsNormArgs& a) {
  if (a.x == 0 || a.weight == 0 || a.out == 0) return Invalid("x, weight and out must be non-null device pointers");
  if (a.sum_out != 0 && a.residual == 0) return Invalid("sum_out is given without a residual (it holds x + residual)");
  if (a.rows < 0 || a.rows > kMaxRows)
    return Invalid("rows=" + std::to_string(a.rows) + " outside [0, " + std::to_string(kMaxRows) + "]");
  if (a.cols < kColsMultiple || a.cols > kMaxCols || a.cols % kColsMultiple != 0)
    return Invalid("cols=" + std::to_string(a.cols) + " must be a multiple of 8 in [8, " + std::to_string(kMaxCols) +
                   "]");
  if (!std::isfinite(a.eps) || a.eps < 0.0f) return Invalid("eps=" + std::to_string(a.eps) + " must be finite and >= 0");
  DFLASH_RETURN_IF_ERROR(CheckTensor("x", a.x, a.x_stride, a.cols));
  DFLASH_RETURN_IF_ERROR(CheckTensor("out", a.out, a.out_stride, a.cols));
  if (a.residual != 0) DFLASH_RETURN_IF_ERROR(CheckTensor("residual", a.residual, a.residual_stride, a.cols));
  if (a.gate != 0) DFLASH_RETURN_IF_ERROR(CheckTensor("gate", a.gate, a.gate_stride, a.cols));
  if (a.sum_out != 0) DFLASH_RETURN_IF_ERROR(CheckTensor("sum_out", a.sum_out, a.sum_out_stride, a.cols));
  if (a.weight % 16 != 0) return Invalid("weight must be 16-byte aligned (read as 16-byte vectors)");

  const std::int64_t weight_bytes = a.cols * (a.weight_dtype == WeightDtype::kFp32 ? 4 : 2);
  const Footprint out = RowsOf("out", a.out, a.out_stride, a);
  const Footprint sum = RowsOf("sum_out", a.sum_out, a.sum_out_stride, a);
  const bool sum_in_place = a.sum_out != 0 && a.sum_out == a.residual && a.sum_out_stride == a.residual_stride;
  std::vector<Footprint> inputs = {RowsOf("x", a.x, a.x_stride, a),
                                   {"weight", static_cast<std::int64_t>(a.weight), 1, weight_bytes, weight_bytes}};
  if (a.gate != 0) inputs.push_back(RowsOf("gate", a.gate, a.gate_stride, a));
  if (a.residual != 0) inputs.push_back(RowsOf("residual", a.residual, a.residual_stride, a));
  for (const Footprint* o : {&out, &sum}) {
    if (o->base == 0) continue;
    for (const Footprint& in : inputs) {
      if (o == &sum && sum_in_place && std::string(in.name) == "residual") continue;
      if (Overlap(*o, in))
        return Invalid(std::string(o->name) + " overlaps " + in.name +
                       (o == &sum && std::string(in.name) == "residual"
                            ? " (sum_out may only be the residual itself: same pointer and stride)"
                            : " (outputs may not overlap inputs or each other)"));
    }
  }
  if (a.sum_out != 0 && Overlap(out, sum)) return Invalid("out overlaps sum_out");
  return Status::Ok();
}

Status LaunchRmsNorm(const tuner::LoadedVariant& winner, const RmsNormArgs& args, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(CheckRmsNormArgs(args));
  Result<Geometry> g = GeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  const ProblemSpec spec = ProblemOf(args);
  DFLASH_ASSIGN_OR_RETURN(CUfunction function, kernels::VariantFunction(winner, KernelNameExpression(*g, spec),
                                                                        "rmsnorm launch", "rmsnorm",
                                                                        ToJson(spec).dump()));
  if (args.rows == 0) return Status::Ok();

  dflash_rmsnorm::RmsNormParams p{};
  p.x = args.x;
  p.residual = args.residual;
  p.gate = args.gate;
  p.weight = args.weight;
  p.sum_out = args.sum_out;
  p.out = args.out;
  p.x_stride = args.x_stride;
  p.residual_stride = args.residual_stride;
  p.gate_stride = args.gate_stride;
  p.sum_out_stride = args.sum_out_stride;
  p.out_stride = args.out_stride;
  p.rows = static_cast<int>(args.rows);
  p.eps = args.eps;

  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>((args.rows + g->rows_per_block - 1) / g->rows_per_block);
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(g->threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::rmsnorm
