// The translation unit NVRTC compiles for every rmsnorm variant: the kernel is instantiated through a name
// expression (see rmsnorm_config.cc), so this file only pulls it in.
#include "rmsnorm.cuh"
