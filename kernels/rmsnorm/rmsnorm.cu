// The translation unit NVRTC compiles for every rmsnorm variant: the kernels are instantiated through name
// expressions (see rmsnorm_config.cc), so this file only pulls them in (the forward, and the plain norm's backward).
#include "rmsnorm.cuh"
#include "rmsnorm_bwd.cuh"
