// The NVRTC translation unit of the attention families: every forward and backward kernel template. The tuner
// instantiates the variant it needs through name expressions (see attention_family.cc).
#include "attention_bwd.cuh"
#include "attention_bwd2d.cuh"
#include "attention_fwd.cuh"
