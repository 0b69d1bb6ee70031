// The host API of the rope family: launches a tuned variant on device pointers.
//   out[t, h, :R] = rotate(x[t, h, :R], sign * theta[t])   (rope.cuh: the neox halves, fp32 math, one bf16 rounding)
//   out[t, h, R:] = x[t, h, R:]
// x: bf16 heads at x + t * x_token_stride + h * x_head_stride (elements); out: [tokens, heads, head_dim] bf16,
// contiguous; cos, sin: [tokens, rotary_dim] fp32, contiguous (trainer/nn/layers.h MakeRope's tables).
// sign = +1 is the forward, sign = -1 its backward (dx = rotate(dy, -theta)).
// Alignment: every pointer 16-byte aligned, both strides multiples of 8 elements. Aliasing: out may not share a byte
// with x or the tables (checked by address range). Graph-capturable: no host synchronisation, no allocation.
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/rope/rope_space.h"
#include "tuner/kernel_family.h"

namespace dflash::rope {

struct RopeArgs {
  CUdeviceptr x = 0;
  CUdeviceptr cos = 0;
  CUdeviceptr sin = 0;
  CUdeviceptr out = 0;
  std::int64_t x_token_stride = 0, x_head_stride = 0;  // elements
  std::int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  float sign = 1.0f;  // +1 or -1
};

ProblemSpec ProblemOf(const RopeArgs& args);

// The checks LaunchRope makes first: InvalidArgument naming the field. Needs no GPU.
Status CheckRopeArgs(const RopeArgs& args);

// Checks the arguments and that the winner holds the kernel of ProblemOf(args), then launches it on `stream`.
// tokens == 0 launches nothing.
Status LaunchRope(const tuner::LoadedVariant& winner, const RopeArgs& args, CUstream stream);

}  // namespace dflash::rope
