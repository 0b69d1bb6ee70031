#include "trainer/train/ops_setup.h"

#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {

Result<RunDevice> ResolveDevice(const TrainOptions& options) {
  RunDevice out;
  const bool gpu = torch::cuda::is_available();
  if (options.device == "auto") {
    out.device = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  } else if (options.device == "cpu") {
    out.device = torch::kCPU;
  } else if (options.device.rfind("cuda", 0) == 0) {
    if (!gpu) {
      return Unsupported("--device " + options.device + ": no GPU visible to LibTorch" +
#ifdef DFLASH_TORCH_CUDA
                         std::string("")
#else
                         std::string(" (this build has no CUDA backend: configure with -DDFLASH_TORCH_CUDA=ON)")
#endif
      );
    }
    try {
      out.device = torch::Device(options.device);
    } catch (const c10::Error&) {
      return InvalidArgument("--device " + options.device + ": not a device (cpu, cuda, cuda:N)");
    }
  } else {
    return InvalidArgument("--device " + options.device + ": not a device (auto, cpu, cuda, cuda:N)");
  }
  if (options.compute_dtype == "auto") {
    out.compute_dtype = out.device.is_cuda() ? torch::kBFloat16 : torch::kFloat;
  } else if (options.compute_dtype == "bf16") {
    out.compute_dtype = torch::kBFloat16;
  } else if (options.compute_dtype == "fp32") {
    out.compute_dtype = torch::kFloat;
  } else {
    return InvalidArgument("--dtype " + options.compute_dtype + ": use auto, bf16 or fp32");
  }
  return out;
}

Result<std::unique_ptr<Ops>> MakeOps(const TrainOptions& options, const RunDevice& device, const TargetConfig& target,
                                     const DrafterConfig& drafter, std::ostream& log) {
  const bool cached = options.kernels == KernelBackend::kCached ||
                      (options.kernels == KernelBackend::kAuto && device.device.is_cuda());
  if (!cached) {
    log << "kernels: LibTorch reference operations on " << device.device.str() << "\n";
    return MakeReferenceOps();
  }
  return Unsupported("the cached-kernel backend is not wired into dflash-train yet; use --kernels reference");
}

}  // namespace dflash::trainer
