#include "trainer/dist/backend.h"

#include <cstdlib>

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace dflash::trainer::dist {

Result<c10::intrusive_ptr<c10d::Backend>> MakeBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const BackendOptions& o) {
  try {
    if (o.device.is_cuda()) {
#ifdef USE_C10D_NCCL
      c10::cuda::set_device(o.device.index());
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = o.timeout;
      return c10::intrusive_ptr<c10d::Backend>(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.world_size, options));
#else
      return Unsupported("this build has no NCCL backend (configure with -DDFLASH_TORCH_CUDA=ON where nccl.h is "
                         "installed)");
#endif
    }
#ifdef USE_C10D_GLOO
    auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.host));
    }
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world_size, options));
#else
    return Unsupported("this build has no gloo backend for CPU ranks (install the gloo headers, Debian's "
                       "libgloo-dev, and reconfigure)");
#endif
  } catch (const std::exception& e) {
    return IoError(std::string("cannot start the ") + (o.device.is_cuda() ? "NCCL" : "gloo") +
                       " process group (rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size) +
                       "): " + e.what());
  }
}

}  // namespace dflash::trainer::dist
