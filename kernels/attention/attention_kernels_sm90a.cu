// The NVRTC translation unit of the attention forward's Hopper tier (compiled for sm_90a only: wgmma). The tuner
// instantiates the variant it needs through name expressions (see attention_family.cc).
#include "attention_fwd_wgmma.cuh"
