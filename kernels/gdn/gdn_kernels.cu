// The NVRTC translation unit of the gdn family: every kernel template of this folder. Variants are instantiated
// through name expressions (e.g. "gdn::gdn_chunk_prep<64, 4>"); nothing here is host code.
#include "gdn_chunk_fused.cuh"
#include "gdn_chunk_output.cuh"
#include "gdn_chunk_prep.cuh"
#include "gdn_chunk_prep_key.cuh"
#include "gdn_chunk_state.cuh"
#include "gdn_recurrent.cuh"
