// The launch-time checks the row-wise kernel families share: a bf16 row tensor's alignment and stride rule, and
// whether two tensors' bytes overlap.
// Who may call it: the row-wise families' launchers (rmsnorm, rmsnorm_bwd, rope). Thread-safety: pure functions.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dflash::kernels {

// The bytes a tensor occupies: `rows` runs of `row_bytes` bytes, `stride_bytes` apart, from `base`.
struct Footprint {
  const char* name;
  std::int64_t base;
  std::int64_t rows;
  std::int64_t row_bytes;
  std::int64_t stride_bytes;
};

// True when the two footprints share a byte: exact for equal strides (two interleaved views of one buffer do not
// overlap), by address range otherwise.
bool Overlap(const Footprint& a, const Footprint& b);

// A bf16 tensor of rows: 16-byte aligned, stride >= cols and a multiple of 8 elements. InvalidArgument
// "<what>: <name> ..." otherwise.
Status CheckRowTensor(const std::string& what, const char* name, CUdeviceptr ptr, std::int64_t stride,
                      std::int64_t cols);

}  // namespace dflash::kernels
