// The translation unit NVRTC compiles for every swiglu variant: the kernel is instantiated through name expressions
// (swiglu_space.cc), so this file only pulls it in.
#include "swiglu.cuh"
