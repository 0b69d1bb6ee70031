// The NVRTC translation unit of the attention families' Hopper tier (compiled for sm_90a only: wgmma), with the
// portable kernels a Hopper variant launches beside its own (the backward's AttnBwdPre / AttnBwdDqConvert, the
// backward workload's forward). The tuner instantiates the variant it needs through name expressions (see
// attention_family.cc).
#include "attention_bwd.cuh"
#include "attention_bwd_tma.cuh"
#include "attention_bwd_wgmma.cuh"
#include "attention_fwd.cuh"
#include "attention_fwd_persistent.cuh"
#include "attention_fwd_tma.cuh"
#include "attention_fwd_wgmma.cuh"
