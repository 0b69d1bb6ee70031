#include "trainer/models/init_generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace dflash::trainer {

at::Generator InitGenerator(std::uint64_t seed, c10::Device device) {
  if (!device.is_cuda()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator gen = at::detail::getCUDAHooks().getNewGenerator(device.has_index() ? device.index() : 0);
  gen.set_current_seed(seed);
  return gen;
}

}  // namespace dflash::trainer
