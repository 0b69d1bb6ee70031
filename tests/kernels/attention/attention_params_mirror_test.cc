// The Python mirror of attention_params.cuh (tools/device/attention_params.py, what the GPU checker launches the
// kernels with) against the header: every field of AttnParams and MaskParams at the same offset with the same size,
// the same struct sizes, the same mask constants and tile-table capacity, the same shared-memory sizes. The field
// lists below must cover every byte of the structs, so a field added to the header fails here until both the list
// and the mirror have it.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/attention/attention_params.cuh"
#include "tests/kernels/python_mirror.h"

namespace dflash_attn {
namespace {

struct Field {
  std::string name;
  std::size_t offset, size;
};
#define DFLASH_FIELD(S, f) Field{#f, offsetof(S, f), sizeof(S::f)}

const std::vector<Field>& MaskFields() {
  static const std::vector<Field> f = {
      DFLASH_FIELD(MaskParams, cu_seqlens), DFLASH_FIELD(MaskParams, anchors),  DFLASH_FIELD(MaskParams, block_valid),
      DFLASH_FIELD(MaskParams, doc_start),  DFLASH_FIELD(MaskParams, kind),     DFLASH_FIELD(MaskParams, seq_q),
      DFLASH_FIELD(MaskParams, seq_kv),     DFLASH_FIELD(MaskParams, num_docs), DFLASH_FIELD(MaskParams, num_blocks),
      DFLASH_FIELD(MaskParams, block_size), DFLASH_FIELD(MaskParams, ctx_len),  DFLASH_FIELD(MaskParams, window),
  };
  return f;
}

const std::vector<Field>& AttnFields() {
  static const std::vector<Field> f = {
      DFLASH_FIELD(AttnParams, q),
      DFLASH_FIELD(AttnParams, k),
      DFLASH_FIELD(AttnParams, v),
      DFLASH_FIELD(AttnParams, o),
      DFLASH_FIELD(AttnParams, lse),
      DFLASH_FIELD(AttnParams, dout),
      DFLASH_FIELD(AttnParams, dq),
      DFLASH_FIELD(AttnParams, dk),
      DFLASH_FIELD(AttnParams, dv),
      DFLASH_FIELD(AttnParams, delta),
      DFLASH_FIELD(AttnParams, dq_accum),
      DFLASH_FIELD(AttnParams, q_batch_stride),
      DFLASH_FIELD(AttnParams, q_head_stride),
      DFLASH_FIELD(AttnParams, q_seq_stride),
      DFLASH_FIELD(AttnParams, k_batch_stride),
      DFLASH_FIELD(AttnParams, k_head_stride),
      DFLASH_FIELD(AttnParams, k_seq_stride),
      DFLASH_FIELD(AttnParams, v_batch_stride),
      DFLASH_FIELD(AttnParams, v_head_stride),
      DFLASH_FIELD(AttnParams, v_seq_stride),
      DFLASH_FIELD(AttnParams, o_batch_stride),
      DFLASH_FIELD(AttnParams, o_head_stride),
      DFLASH_FIELD(AttnParams, o_seq_stride),
      DFLASH_FIELD(AttnParams, do_batch_stride),
      DFLASH_FIELD(AttnParams, do_head_stride),
      DFLASH_FIELD(AttnParams, do_seq_stride),
      DFLASH_FIELD(AttnParams, dq_batch_stride),
      DFLASH_FIELD(AttnParams, dq_head_stride),
      DFLASH_FIELD(AttnParams, dq_seq_stride),
      DFLASH_FIELD(AttnParams, dk_batch_stride),
      DFLASH_FIELD(AttnParams, dk_head_stride),
      DFLASH_FIELD(AttnParams, dk_seq_stride),
      DFLASH_FIELD(AttnParams, dv_batch_stride),
      DFLASH_FIELD(AttnParams, dv_head_stride),
      DFLASH_FIELD(AttnParams, dv_seq_stride),
      DFLASH_FIELD(AttnParams, batch),
      DFLASH_FIELD(AttnParams, heads_q),
      DFLASH_FIELD(AttnParams, heads_kv),
      DFLASH_FIELD(AttnParams, head_dim),
      DFLASH_FIELD(AttnParams, scale),
      DFLASH_FIELD(AttnParams, pad0),
      DFLASH_FIELD(AttnParams, mask),
  };
  return f;
}

nlohmann::json Layout(const std::vector<Field>& fields, std::size_t size) {
  nlohmann::json j = {{"size", size}, {"fields", nlohmann::json::array()}};
  for (const Field& f : fields) j["fields"].push_back({f.name, f.offset, f.size});
  return j;
}

// In declaration order each listed field starts where the one before it ends and the last ends the struct: the
// structs have no padding, so a field the header has and the list lacks leaves bytes that no listed field covers.
void ExpectListCoversEveryByte(const char* what, const std::vector<Field>& fields, std::size_t size) {
  std::size_t end = 0;
  for (const Field& f : fields) {
    EXPECT_EQ(f.offset, end) << what << "." << f.name << ": bytes [" << end << ", " << f.offset
                             << ") belong to no listed field (a field the header has and this test lacks?)";
    end = f.offset + f.size;
  }
  EXPECT_EQ(end, size) << what << ": bytes [" << end << ", " << size << ") belong to no listed field";
}

TEST(AttentionParamsMirror, TheFieldListsCoverEveryByteOfTheHeadersStructs) {
  ExpectListCoversEveryByte("MaskParams", MaskFields(), sizeof(MaskParams));
  ExpectListCoversEveryByte("AttnParams", AttnFields(), sizeof(AttnParams));
}

TEST(AttentionParamsMirror, PythonStructsHaveEveryFieldAtTheHeadersOffsetAndSize) {
  const nlohmann::json py = dflash::testing::RunPythonMirror("tools/device/attention_params.py");
  ASSERT_FALSE(py.is_null());
  EXPECT_EQ(py["structs"]["MaskParams"], Layout(MaskFields(), sizeof(MaskParams)))
      << "tools/device/attention_params.py: " << py["structs"]["MaskParams"].dump();
  EXPECT_EQ(py["structs"]["AttnParams"], Layout(AttnFields(), sizeof(AttnParams)))
      << "tools/device/attention_params.py: " << py["structs"]["AttnParams"].dump();
}

TEST(AttentionParamsMirror, PythonConstantsAndSharedMemorySizesAreTheHeaders) {
  const nlohmann::json py = dflash::testing::RunPythonMirror("tools/device/attention_params.py");
  ASSERT_FALSE(py.is_null());
  const nlohmann::json constants = {{"mask_none", kMaskNone},
                                    {"mask_causal", kMaskCausal},
                                    {"mask_doc", kMaskDocCausal},
                                    {"mask_dflash_full", kMaskDflashFull},
                                    {"mask_dflash_sliding", kMaskDflashSliding},
                                    {"num_mask_kinds", kNumMaskKinds},
                                    {"mask_doc_bound", kMaskDocBound},
                                    {"max_tiles", kMaxTiles}};
  EXPECT_EQ(py["constants"], constants);
  // The grid of attention_params.py's SMEM_GRID, in its order.
  nlohmann::json smem = {{"fwd", nlohmann::json::array()},
                         {"bwd", nlohmann::json::array()},
                         {"bwd2d", nlohmann::json::array()},
                         {"dq", nlohmann::json::array()}};
  for (int d : {64, 128, 256})
    for (int bm : {16, 32, 64, 128})
      for (int bn : {16, 32, 64, 128})
        for (int st : {1, 2}) {
          smem["fwd"].push_back(FwdSmemBytes(d, bm, bn, st));
          smem["bwd"].push_back(BwdSmemBytes(d, bm, bn, st));
          smem["bwd2d"].push_back(Bwd2dSmemBytes(d, bm, bn, st));
          smem["dq"].push_back(BwdDqSmemBytes(d, bm, bn, st));
        }
  for (const char* k : {"fwd", "bwd", "bwd2d", "dq"}) EXPECT_EQ(py["smem"][k], smem[k]) << k << " shared memory";
}

}  // namespace
}  // namespace dflash_attn
