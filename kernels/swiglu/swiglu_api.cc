#include "kernels/swiglu/swiglu_api.h"

#include <string>
#include <tuple>

#include "kernels/common/variant_function.h"
#include "kernels/swiglu/swiglu_params.h"
#include "tuner/gpu_runtime.h"

namespace dflash::swiglu {
namespace {

constexpr const char* kWhat = "swiglu launch";

Status Invalid(const std::string& what) { return InvalidArgument(std::string(kWhat) + ": " + what); }

struct Range {
  const char* name;
  std::int64_t begin, end;  // bytes [begin, end)
};

bool Overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

Range RowsOf(const char* name, CUdeviceptr base, std::int64_t stride, const SwigluArgs& a) {
  const auto b = static_cast<std::int64_t>(base);
  return {name, b, b + 2 * ((a.rows - 1) * stride + a.cols)};
}

}  // namespace

ProblemSpec ProblemOf(const SwigluArgs& a) { return ProblemSpec{a.rows, a.cols}; }

Status CheckSwigluArgs(const SwigluArgs& a) {
  if (a.gate == 0 || a.up == 0 || a.out == 0) return Invalid("gate, up and out must be non-null device pointers");
  if (a.rows < 0 || a.rows > kMaxRows) return Invalid("rows=" + std::to_string(a.rows) + " out of range");
  if (!Supported(a.cols)) return Invalid("cols=" + std::to_string(a.cols) + " must be a multiple of 8 in [8, 2^20]");
  for (const auto& [name, ptr, stride] : {std::tuple<const char*, CUdeviceptr, std::int64_t>{"gate", a.gate, a.gate_stride},
                                          {"up", a.up, a.up_stride}, {"out", a.out, a.cols}}) {
    if (ptr % 16 != 0) return Invalid(std::string(name) + " must be 16-byte aligned (read as 16-byte vectors)");
    if (stride < a.cols || stride % 8 != 0)
      return Invalid(std::string(name) + "_stride=" + std::to_string(stride) + " must be >= cols=" +
                     std::to_string(a.cols) + " and a multiple of 8 elements");
  }
  if (a.rows == 0) return Status::Ok();
  const Range out = RowsOf("out", a.out, a.cols, a);
  for (const Range& in : {RowsOf("gate", a.gate, a.gate_stride, a), RowsOf("up", a.up, a.up_stride, a)}) {
    if (Overlap(out, in)) return Invalid(std::string("out overlaps ") + in.name + " (out may not overlap an input)");
  }
  return Status::Ok();
}

Status LaunchSwiglu(const tuner::LoadedVariant& winner, const SwigluArgs& args, CUstream stream) {
  DFLASH_RETURN_IF_ERROR(CheckSwigluArgs(args));
  Result<Geometry> g = GeometryOf(winner.config);
  if (!g.ok()) return Invalid("variant " + winner.label + ": " + g.status().message());
  const ProblemSpec spec = ProblemOf(args);
  DFLASH_ASSIGN_OR_RETURN(CUfunction function, kernels::VariantFunction(winner, KernelNameExpression(*g), kWhat,
                                                                        "swiglu", ToJson(spec).dump()));
  if (args.rows == 0) return Status::Ok();
  dflash_swiglu::SwigluParams p{};
  p.gate = args.gate;
  p.up = args.up;
  p.out = args.out;
  p.gate_stride = args.gate_stride;
  p.up_stride = args.up_stride;
  p.rows = args.rows;
  p.cols = static_cast<int>(args.cols);
  gpu::Dim3 grid;
  grid.x = static_cast<unsigned>(GridBlocks(*g, spec));
  gpu::Dim3 block;
  block.x = static_cast<unsigned>(g->threads);
  void* kernel_args[] = {&p};
  return gpu::Launch(function, grid, block, 0, stream, kernel_args, winner.label);
}

}  // namespace dflash::swiglu
