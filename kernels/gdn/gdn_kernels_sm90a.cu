// The NVRTC translation unit of the gdn family's Hopper tier (compiled for sm_90a only: wgmma): the wgmma fused pass
// with the portable kernels a Hopper variant launches beside it (prep, per value head or per key head, the split pass's
// transfer and combine, the recurrent step). Variants are instantiated through name expressions (gdn_config.cc,
// KernelNamesOf).
#include "gdn_chunk_fused_wgmma.cuh"
#include "gdn_chunk_prep.cuh"
#include "gdn_chunk_prep_key.cuh"
#include "gdn_chunk_state.cuh"
#include "gdn_recurrent.cuh"
