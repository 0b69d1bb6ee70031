#include "kernels/common/tensor_map.h"

#include <string>

#include "tuner/gpu_runtime.h"

namespace dflash::kernels {

Result<CUtensorMap> EncodeSw128TileMap(const Bf16TileTensor& t, unsigned box_rows, std::string_view name) {
  const std::int64_t row_bytes = t.cols * 2;
  // The driver checks strides it never uses, so a dimension of extent 1 gets the packed one.
  auto stride = [](std::int64_t elems, std::int64_t extent, std::int64_t fallback_bytes) {
    return static_cast<cuuint64_t>(extent > 1 ? elems * 2 : fallback_bytes);
  };
  const cuuint64_t row_stride = stride(t.row_stride, t.rows, row_bytes);
  const cuuint64_t head_stride = stride(t.head_stride, t.heads, static_cast<std::int64_t>(row_stride) * t.rows);
  const cuuint64_t batch_stride =
      stride(t.batch_stride, t.batch, static_cast<std::int64_t>(head_stride) * t.heads);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.cols), static_cast<cuuint64_t>(t.rows),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  const cuuint64_t strides[3] = {row_stride, head_stride, batch_stride};
  const cuuint32_t box[4] = {64, box_rows, 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  DFLASH_ASSIGN_OR_RETURN(const gpu::DriverApi* api, gpu::Driver());
  CUtensorMap map;
  const CUresult r = api->TensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, reinterpret_cast<void*>(t.ptr), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DFLASH_RETURN_IF_ERROR(gpu::CheckCu(r, "cuTensorMapEncodeTiled", "tensor map of " + std::string(name)));
  return map;
}

}  // namespace dflash::kernels
