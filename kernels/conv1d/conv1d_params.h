// Conv1dParams: the one kernel argument of every conv1d kernel, shared verbatim by the CUDA source (NVRTC) and the
// host launcher so both sides agree on its layout. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: conv1d.cuh and conv1d_api.cc. Thread-safety: a plain value.
#pragma once

namespace dflash_conv1d {

// y[t, c] = silu(bias[c] + sum_{j=0..3} w[c, j] * x[t - 3 + j, c]), positions before the start of the token's own
// sequence (per cu_seqlens) read as 0. Addresses are device pointers; strides are in elements.
struct Conv1dParams {
  unsigned long long x;           // const bf16*, element (t, c) at x[t * x_stride_t + c * x_stride_c]
  unsigned long long weight;      // const bf16* [channels, 1, 4] contiguous (HF conv1d.weight)
  unsigned long long bias;        // const bf16* [channels], or 0 for no bias
  unsigned long long y;           // bf16*, element (t, c) at y[t * y_stride_t + c * y_stride_c]
  unsigned long long cu_seqlens;  // const int* [num_seqs + 1] (0, ..., tokens), or 0 for one sequence
  long long x_stride_t;
  long long x_stride_c;
  long long y_stride_t;
  long long y_stride_c;
  int tokens;
  int channels;
  int num_seqs;
  // 1 when the kernel's vector loads (stores) along its unit-stride dimension are aligned for every thread whose
  // vector lies fully in bounds: the launcher computes these from the pointers and strides; 0 selects scalar access.
  int x_vec_ok;
  int y_vec_ok;
  int pad_;
};

static_assert(sizeof(Conv1dParams) == 96, "Conv1dParams layout must match on host and device");

}  // namespace dflash_conv1d
