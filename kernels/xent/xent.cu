// The translation unit NVRTC compiles for every xent variant: the kernels are instantiated through name expressions
// (see xent_config.cc), so this file only pulls them in.
#include "xent.cuh"
