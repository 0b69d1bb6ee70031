// The host API of the swiglu family: launches a tuned variant on device pointers.
//   out[r, c] = bf16(float(bf16(silu(gate[r, c]))) * float(up[r, c]))   (swiglu.cuh: LibTorch's silu-then-product)
// gate, up: bf16 rows at base + r * stride (elements); out: [rows, cols] bf16, contiguous.
// Alignment: every pointer 16-byte aligned, strides multiples of 8 elements and >= cols. Aliasing: out may not share
// a byte with gate or up (checked by address range). Graph-capturable: no host synchronisation, no allocation.
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/swiglu/swiglu_space.h"
#include "tuner/kernel_family.h"

namespace dflash::swiglu {

struct SwigluArgs {
  CUdeviceptr gate = 0;
  CUdeviceptr up = 0;
  CUdeviceptr out = 0;
  std::int64_t gate_stride = 0, up_stride = 0;  // elements
  std::int64_t rows = 0, cols = 0;
};

ProblemSpec ProblemOf(const SwigluArgs& args);

// The checks LaunchSwiglu makes first: InvalidArgument naming the field. Needs no GPU.
Status CheckSwigluArgs(const SwigluArgs& args);

// Checks the arguments and that the winner holds the kernel, then launches it on `stream`. rows == 0 launches
// nothing.
Status LaunchSwiglu(const tuner::LoadedVariant& winner, const SwigluArgs& args, CUstream stream);

}  // namespace dflash::swiglu
