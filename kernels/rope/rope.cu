// The translation unit NVRTC compiles for every rope variant: the kernel is instantiated through name expressions
// (rope_config.cc), so this file only pulls it in.
#include "rope.cuh"
