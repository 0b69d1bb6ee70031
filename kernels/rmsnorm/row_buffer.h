// RowBuffer: a [rows, cols] bf16 tensor of the rmsnorm workloads with `stride`-element rows: its host image (the gaps
// between rows poisoned with kRowPoison, a NaN) and its device buffer.
// Who may use it: rmsnorm_workload.cc and rmsnorm_bwd_workload.cc. Thread-safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tuner/gpu_runtime.h"

namespace dflash::rmsnorm {

constexpr std::uint16_t kRowPoison = 0xFFFF;  // a NaN in bf16 (0xFFFFFFFF, two of them, is one in fp32)

struct RowBuffer {
  std::int64_t stride = 0;
  std::vector<std::uint16_t> host;
  gpu::DeviceBuffer dev;

  // `rows` rows of `cols` plus `pad` poisoned elements each.
  void Shape(std::int64_t rows, std::int64_t cols, std::int64_t pad) {
    stride = cols + pad;
    host.assign(static_cast<std::size_t>(rows * stride), kRowPoison);
  }
  std::size_t bytes() const { return host.size() * 2; }
  std::uint16_t& at(std::int64_t row, std::int64_t col) { return host[static_cast<std::size_t>(row * stride + col)]; }
};

}  // namespace dflash::rmsnorm
