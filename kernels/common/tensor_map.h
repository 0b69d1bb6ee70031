// The tensor maps the Hopper tiers' bulk tensor copies read (kernels/common/tma.cuh): a bf16 tensor of up to four
// dimensions (columns, rows, heads, batch) with boxes of 64 columns x box_rows rows in the 128-byte swizzle, the
// layout wgmma.cuh's descriptors read. Encoded on the host with the driver's cuTensorMapEncodeTiled (resolved
// through tuner/gpu_runtime's driver table) and passed to a kernel in a __grid_constant__ parameter.
// Who may call it: the families' launchers (attention's today). Thread-safety: pure functions (the driver call is
// thread-safe).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace dflash::kernels {

// Extents and strides in elements; a dimension of extent 1 may have any stride (it is never stepped).
struct Bf16TileTensor {
  CUdeviceptr ptr = 0;
  std::int64_t cols = 0, rows = 0, heads = 1, batch = 1;
  std::int64_t row_stride = 0, head_stride = 0, batch_stride = 0;
};

// The map of `t` with boxes of 64 columns x box_rows rows (rows or columns outside the tensor read as zeros). The
// copy engine needs a 16-byte aligned base and strides of 16-byte multiples (the launchers' tensor checks);
// the driver's refusal comes back as Internal naming `name`.
Result<CUtensorMap> EncodeSw128TileMap(const Bf16TileTensor& t, unsigned box_rows, std::string_view name);

}  // namespace dflash::kernels
