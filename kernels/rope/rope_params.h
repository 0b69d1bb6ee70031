// RopeParams: the one kernel argument of the rope kernels, shared verbatim by the CUDA source (NVRTC) and the host
// launcher. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: rope.cuh and its launcher. Thread-safety: a plain value.
#pragma once

namespace dflash_rope {

// Head (t, h) of x starts at x + t * x_token_stride + h * x_head_stride (elements, 16-byte aligned); out is
// [tokens, heads, HEAD_DIM] contiguous; cos and sin are [tokens, ROTARY] fp32, contiguous.
struct RopeParams {
  unsigned long long x;    // const bf16*
  unsigned long long cos;  // const float*
  unsigned long long sin;  // const float*
  unsigned long long out;  // bf16*
  long long x_token_stride;
  long long x_head_stride;
  int tokens;
  int heads;
  float sign;  // +1: rotate by +theta (the forward); -1: by -theta (the backward, the rotation's transpose)
  int pad;
};

static_assert(sizeof(RopeParams) == 64, "RopeParams layout must match on host and device");

}  // namespace dflash_rope
