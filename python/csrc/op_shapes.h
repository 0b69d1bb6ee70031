// OpShapes: the operator shapes the dflash_tune package can name without tensors (for dflash_tune.warmup and the
// cache checks), as setup::OpShape through setup's one derivation of kernel keys, so that a key warmed or checked
// here is exactly the key the operator launches. An operation and its dims:
//   "dflash_attention": [ctx_len, num_blocks, block_size, window, heads_q, heads_kv, head_dim, packed (0/1)]
//   "causal_conv1d":    [tokens, channels, num_docs]
//   "gated_delta_rule": [tokens, heads, value_heads, num_docs]
// Who may call: cache_ops.cc. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "setup/kernel_requests.h"

namespace dflash::python {

// The shape; a c10::Error naming the operation's dims for an unknown operation or a wrong count.
setup::OpShape ShapeOf(const std::string& operation, const std::vector<std::int64_t>& dims);

}  // namespace dflash::python
