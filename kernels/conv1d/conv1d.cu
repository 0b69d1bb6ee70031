// The translation unit NVRTC compiles for every conv1d variant: the kernels are instantiated through name
// expressions (see conv1d_config.cc), so this file only pulls them in.
#include "conv1d.cuh"
