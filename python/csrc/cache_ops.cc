// The cache queries of the dflash_tune library: no tensors, so they run without a GPU (a CPU-only machine checks a
// cache meant for another arch), defined with their (catch-all) implementations:
//   kernel_problems(operation, dims): the kernel requests of one operation's shape (op_shapes.h) as
//     "family=problem JSON" lines (what `dflash-tune warmup --problem` takes);
//   missing_kernels(operation, dims, arch): the entries of those the cache lacks for `arch`, one NotFound text each
//     naming the key and its warmup command (empty: all there);
//   cache_dir(): the cache directory the operators use;
//   device_arch(cc): the arch a device of compute capability cc (90 for 9.0) tunes and loads for (sm_90a on 9.0).
#include <torch/library.h>
#include <torch/torch.h>

#include "op_shapes.h"
#include "runtime.h"
#include "tuner/arch_limits.h"
#include "tuner/kernel_provider.h"

namespace dflash::python {
namespace {

std::vector<std::string> KernelProblems(const std::string& operation, c10::IntArrayRef dims) {
  std::vector<std::string> out;
  for (const setup::KernelRequest& r : setup::KernelRequestsFor(ShapeOf(operation, dims.vec()))) {
    out.push_back(std::string(r.family->name()) + "=" + r.problem.dump());
  }
  return out;
}

std::vector<std::string> MissingKernels(const std::string& operation, c10::IntArrayRef dims, const std::string& arch) {
  TORCH_CHECK(arch.rfind("sm_", 0) == 0, "dflash_tune: arch must look like sm_90 or sm_120, got '", arch, "'");
  cache::KernelCache& cache = Cache();
  std::vector<std::string> missing;
  for (const setup::KernelRequest& r : setup::KernelRequestsFor(ShapeOf(operation, dims.vec()))) {
    Result<cache::Entry> entry = tuner::FindTuned(cache, *r.family, r.problem, arch);
    if (entry.ok()) continue;
    TORCH_CHECK(entry.status().code() == ErrorCode::kNotFound, "dflash_tune ", r.operation, ": ",
                entry.status().ToString());
    missing.push_back(r.operation + ": " + entry.status().message());
  }
  return missing;
}

std::string CacheDir() { return Cache().dir().string(); }

std::string DeviceArchOf(std::int64_t cc) { return tuner::DeviceArch(static_cast<int>(cc)); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(dflash_tune, m) {
  m.def("kernel_problems(str operation, int[] dims) -> str[]", &KernelProblems);
  m.def("missing_kernels(str operation, int[] dims, str arch) -> str[]", &MissingKernels);
  m.def("cache_dir() -> str", &CacheDir);
  m.def("device_arch(int cc) -> str", &DeviceArchOf);
}

}  // namespace dflash::python
