#include "kernels/common/row_tensors.h"

namespace dflash::kernels {
namespace {

constexpr std::int64_t kRowAlignBytes = 16;
constexpr std::int64_t kRowAlignElements = 8;  // bf16 elements in 16 bytes

// Floor of a / b for b > 0.
std::int64_t FloorDiv(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

// Exact for equal strides: row i of a meets row j of b iff d - wa < (i - j) * stride < d + wb, d = b.base - a.base.
bool Overlap(const Footprint& a, const Footprint& b) {
  if (a.rows == 0 || b.rows == 0) return false;
  const std::int64_t a_end = a.base + (a.rows - 1) * a.stride_bytes + a.row_bytes;
  const std::int64_t b_end = b.base + (b.rows - 1) * b.stride_bytes + b.row_bytes;
  if (a_end <= b.base || b_end <= a.base) return false;
  if (a.stride_bytes != b.stride_bytes) return true;
  const std::int64_t s = a.stride_bytes, d = b.base - a.base;
  // The smallest k = i - j with k * s > d - a.row_bytes, within i - j in [-(b.rows - 1), a.rows - 1].
  std::int64_t k = FloorDiv(d - a.row_bytes, s) + 1;
  if (k < -(b.rows - 1)) k = -(b.rows - 1);
  return k <= a.rows - 1 && k * s < d + b.row_bytes;
}

Status CheckRowTensor(const std::string& what, const char* name, CUdeviceptr ptr, std::int64_t stride,
                      std::int64_t cols) {
  if (ptr % kRowAlignBytes != 0)
    return InvalidArgument(what + ": " + name +
                           " must be 16-byte aligned (rows are read and written as 16-byte vectors)");
  if (stride < cols || stride % kRowAlignElements != 0)
    return InvalidArgument(what + ": " + name + "_stride=" + std::to_string(stride) + " must be >= cols=" +
                           std::to_string(cols) + " and a multiple of 8 elements (16-byte aligned rows)");
  return Status::Ok();
}

}  // namespace dflash::kernels
