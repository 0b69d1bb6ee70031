#include "kernels/registry.h"

#include <array>

#include "kernels/attention/attention_family.h"
#include "kernels/conv1d/conv1d_family.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_family.h"
#include "kernels/rope/rope_family.h"
#include "kernels/swiglu/swiglu_family.h"
#include "kernels/xent/xent_family.h"

namespace dflash::kernels {

std::span<const tuner::KernelFamily* const> AllFamilies() {
  static const std::array<const tuner::KernelFamily*, 9> kFamilies = {
      &conv1d::Family(), &gdn::ChunkedForwardFamily(), &attention::ForwardFamily(), &attention::BackwardFamily(),
      &rmsnorm::Family(), &rmsnorm::BackwardFamily(), &rope::Family(),
      &swiglu::Family(), &xent::Family()};
  return kFamilies;
}

const tuner::KernelFamily* FindFamily(std::string_view name) {
  for (const tuner::KernelFamily* f : AllFamilies()) {
    if (f->name() == name) return f;
  }
  return nullptr;
}

}  // namespace dflash::kernels
