// The Python mirror of gdn_layout.h (tools/device/gdn_layout.py, what the GPU checker sizes the kernels' shared
// memory with) against the header: the same head dimension, padded widths and shared-memory formulas over a grid
// of chunk sizes and column slices (the tuning space's and beyond).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/gdn/gdn_layout.h"
#include "tests/kernels/python_mirror.h"

namespace gdn {
namespace {

TEST(GdnLayoutMirror, PythonConstantsAndSharedMemorySizesAreTheHeaders) {
  const nlohmann::json py = dflash::testing::RunPythonMirror("tools/device/gdn_layout.py");
  ASSERT_FALSE(py.is_null());
  // The grids of gdn_layout.py (CHUNKS, COLUMNS), in its order.
  const int chunks[] = {16, 32, 64, 128}, columns[] = {16, 32, 64, 128};
  nlohmann::json cc = {{"constants", {{"dim", kDim}}}};
  for (const char* k : {"pad_bf16", "pad_f32", "prep", "state", "output", "fused", "combine"})
    cc[k] = nlohmann::json::array();
  for (const int* group : {chunks, columns})
    for (int i = 0; i < 4; ++i) {
      cc["pad_bf16"].push_back(PadBf16Cols(group[i]));
      cc["pad_f32"].push_back(PadF32Cols(group[i]));
    }
  for (int c : chunks) {
    cc["prep"].push_back(PrepSharedBytes(c));
    for (int bv : columns) {
      cc["state"].push_back(StateSharedBytes(c, bv));
      cc["output"].push_back(OutputSharedBytes(c, bv));
      for (int st : {1, 2}) cc["fused"].push_back(FusedSharedBytes(c, bv, st));
    }
  }
  for (int bv : columns) cc["combine"].push_back(CombineSharedBytes(bv));
  for (const auto& [key, value] : cc.items()) EXPECT_EQ(py[key], value) << key << ": tools/device/gdn_layout.py";
}

}  // namespace
}  // namespace gdn
