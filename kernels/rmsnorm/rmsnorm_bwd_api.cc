#include "kernels/rmsnorm/rmsnorm_bwd_api.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/row_tensors.h"
#include "kernels/common/variant_function.h"
#include "kernels/rmsnorm/rmsnorm_bwd_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::rmsnorm {
namespace {

using kernels::CheckRowTensor;
using kernels::Footprint;
using kernels::Overlap;

constexpr const char* kWhat = "rmsnorm_bwd launch";

Status Invalid(const std::string& what) { return InvalidArgument(std::string(kWhat) + ": " + what); }

Footprint RowsOf(const char* name, CUdeviceptr ptr, std::int64_t stride, const RmsNormBwdArgs& a) {
  return {name, static_cast<std::int64_t>(ptr), a.rows, 2 * a.cols, 2 * stride};
}

}  // namespace

BwdProblemSpec ProblemOf(const RmsNormBwdArgs& args) {
  return BwdProblemSpec{args.rows, args.cols, args.kind, args.weight_dtype};
}

Result<std::int64_t> DwPartialRows(const tuner::LoadedVariant& winner, std::int64_t rows) {
  Result<BwdGeometry> g = BwdGeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  return DwPartialRows(*g, rows);
}

Status CheckRmsNormBwdArgs(const RmsNormBwdArgs& a, std::int64_t dw_partial_rows) {
  if (a.x == 0 || a.dy == 0 || a.weight == 0 || a.dx == 0 || a.dw_partial == 0)
    return Invalid("x, dy, weight, dx and dw_partial must be non-null device pointers");
  if (a.rows < 0 || a.rows > kMaxRows)
    return Invalid("rows=" + std::to_string(a.rows) + " outside [0, " + std::to_string(kMaxRows) + "]");
  if (a.cols < kColsMultiple || a.cols > kMaxCols || a.cols % kColsMultiple != 0)
    return Invalid("cols=" + std::to_string(a.cols) + " must be a multiple of 8 in [8, " + std::to_string(kMaxCols) +
                   "]");
  if (!std::isfinite(a.eps) || a.eps < 0.0f) return Invalid("eps=" + std::to_string(a.eps) + " must be finite and >= 0");
  DFLASH_RETURN_IF_ERROR(CheckRowTensor(kWhat, "x", a.x, a.x_stride, a.cols));
  DFLASH_RETURN_IF_ERROR(CheckRowTensor(kWhat, "dy", a.dy, a.dy_stride, a.cols));
  DFLASH_RETURN_IF_ERROR(CheckRowTensor(kWhat, "dx", a.dx, a.dx_stride, a.cols));
  if (a.weight % 16 != 0) return Invalid("weight must be 16-byte aligned (read as 16-byte vectors)");
  if (a.dw_partial % 16 != 0) return Invalid("dw_partial must be 16-byte aligned (written as 16-byte vectors)");
  if (dw_partial_rows < 0) return Invalid("dw_partial_rows=" + std::to_string(dw_partial_rows) + " < 0");

  const std::int64_t weight_bytes = a.cols * (a.weight_dtype == WeightDtype::kFp32 ? 4 : 2);
  const std::int64_t partial_bytes = dw_partial_rows * a.cols * 4;
  const Footprint dx = RowsOf("dx", a.dx, a.dx_stride, a);
  const Footprint partial{"dw_partial", static_cast<std::int64_t>(a.dw_partial), 1, partial_bytes, partial_bytes};
  const std::vector<Footprint> inputs = {
      RowsOf("x", a.x, a.x_stride, a), RowsOf("dy", a.dy, a.dy_stride, a),
      {"weight", static_cast<std::int64_t>(a.weight), 1, weight_bytes, weight_bytes}};
  for (const Footprint* o : {&dx, &partial}) {
    for (const Footprint& in : inputs) {
      if (Overlap(*o, in))
        return Invalid(std::string(o->name) + " overlaps " + in.name + " (outputs may not overlap inputs)");
    }
  }
  if (Overlap(dx, partial)) return Invalid("dx overlaps dw_partial");
  return Status::Ok();
}

Status LaunchRmsNormBackward(const tuner::LoadedVariant& winner, const RmsNormBwdArgs& args, CUstream stream) {
  Result<BwdGeometry> g = BwdGeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  DFLASH_RETURN_IF_ERROR(CheckRmsNormBwdArgs(args, DwPartialRows(*g, args.rows)));
  const BwdProblemSpec spec = ProblemOf(args);
  DFLASH_ASSIGN_OR_RETURN(CUfunction function, kernels::VariantFunction(winner, BwdKernelNameExpression(*g, spec),
                                                                        kWhat, "rmsnorm_bwd", ToJson(spec).dump()));
  if (args.rows == 0) return Status::Ok();

  dflash_rmsnorm::RmsNormBwdParams p{};
  p.x = args.x;
  p.dy = args.dy;
  p.weight = args.weight;
  p.dx = args.dx;
  p.dw_partial = args.dw_partial;
  p.x_stride = args.x_stride;
  p.dy_stride = args.dy_stride;
  p.dx_stride = args.dx_stride;
  p.rows = static_cast<int>(args.rows);
  p.eps = args.eps;

  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>(BwdGridBlocks(*g, args.rows));
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(g->row.threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::rmsnorm
