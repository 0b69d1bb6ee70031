// XentParams: the one kernel argument of every xent kernel, shared verbatim by the CUDA source (NVRTC) and the host
// launcher so both sides agree on its layout. Plain C types only: no host or CUDA headers.
// Owns: the argument layout. Who may use it: xent.cuh and xent_api.cc. Thread-safety: a plain value.
#pragma once

namespace dflash_xent {

// Row r of the logits starts at logits + r * row_stride (fp32 elements, 16-byte aligned), row r of the gradient at
// grad + r * grad_row_stride (bf16 elements, 8-byte aligned). Addresses are device pointers.
struct XentParams {
  unsigned long long logits;   // const float*  [rows, vocab] (row_stride)
  unsigned long long labels;   // const long long* [rows]; -100 or a value outside [0, vocab): the row is ignored
  unsigned long long weights;  // const float* [rows]; 0: the row is ignored
  unsigned long long loss;     // float* [rows]
  unsigned long long argmax;   // long long* [rows]
  unsigned long long grad;     // bf16* [rows, vocab] (grad_row_stride); read by the kernels built with the gradient
  long long row_stride;
  long long grad_row_stride;
  int rows;
  int vocab;
  float grad_scale;
  int pad_;
};

static_assert(sizeof(XentParams) == 80, "XentParams layout must match on host and device");

}  // namespace dflash_xent
