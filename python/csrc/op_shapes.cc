#include "op_shapes.h"

#include <torch/torch.h>

namespace dflash::python {
namespace {

void CheckDims(const std::string& operation, const std::vector<std::int64_t>& dims, std::size_t count,
               const char* names) {
  TORCH_CHECK(dims.size() == count, "dflash_tune: ", operation, " takes the dims [", names, "], got ", dims.size(),
              " numbers");
  for (std::int64_t d : dims) TORCH_CHECK(d >= 0, "dflash_tune: ", operation, " dims must be >= 0");
}

}  // namespace

setup::OpShape ShapeOf(const std::string& operation, const std::vector<std::int64_t>& d) {
  if (operation == "dflash_attention") {
    CheckDims(operation, d, 8, "ctx_len, num_blocks, block_size, window, heads_q, heads_kv, head_dim, packed");
    return setup::OpShape::DraftAttention(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] != 0);
  }
  if (operation == "causal_conv1d") {
    CheckDims(operation, d, 3, "tokens, channels, num_docs");
    return setup::OpShape::Conv1d(d[0], d[1], d[2]);
  }
  if (operation == "gated_delta_rule") {
    CheckDims(operation, d, 4, "tokens, heads, value_heads, num_docs");
    return setup::OpShape::GatedDeltaRule(d[0], static_cast<int>(d[1]), static_cast<int>(d[2]), d[3]);
  }
  TORCH_CHECK(false, "dflash_tune: unknown operation '", operation,
              "' (dflash_attention, causal_conv1d or gated_delta_rule)");
}

}  // namespace dflash::python
