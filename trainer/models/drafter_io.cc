// Drafter::Save / Drafter::Load: the public drafters' folder layout (config.json + model.safetensors).
#include <set>
#include <string>
#include <system_error>

#include "base/atomic_file.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/models/drafter.h"
#include "trainer/models/drafter_config.h"
#include "trainer/nn/tensor_io.h"

namespace dflash::trainer {

Status Drafter::Save(const std::filesystem::path& dir, torch::Dtype dtype) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("cannot create drafter folder " + dir.string() + ": " + ec.message());
  DFLASH_RETURN_IF_ERROR(nn::SaveTensors(dir / kSingleSafetensorsName, params_, dtype));
  return AtomicWriteText(dir / "config.json", DrafterConfigJson(config_, dtype).dump(2) + "\n");
}

Result<std::unique_ptr<Drafter>> Drafter::Load(const std::filesystem::path& dir, torch::Device device) {
  DFLASH_ASSIGN_OR_RETURN(setup::DrafterConfig parsed, setup::LoadDrafterConfig(dir));
  auto resolved = ResolveDrafterConfig(parsed);
  if (!resolved.ok()) return resolved.status().WithContext((dir / "config.json").string());
  DFLASH_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  std::vector<TensorSpec> specs;
  for (const ParamSpec& p : Layout(*resolved)) specs.push_back({p.name, p.shape, std::nullopt});
  DFLASH_RETURN_IF_ERROR(checkpoint.CheckTensors(specs));
  std::set<std::string> known;
  for (const TensorSpec& s : specs) known.insert(s.name);
  for (const std::string& name : checkpoint.Names()) {
    if (!known.count(name)) return InvalidArgument(checkpoint.path().string() + " holds tensor " + name + ", which a DFlash "
                                       "drafter of this config does not have");
  }
  return Build(std::move(*resolved), device, [&](const ParamSpec& p) -> Result<torch::Tensor> {
    DFLASH_ASSIGN_OR_RETURN(TensorInfo info, checkpoint.Info(p.name));
    if (info.dtype != DType::kBF16 && info.dtype != DType::kF16 && info.dtype != DType::kF32 &&
        info.dtype != DType::kF64) {
      return InvalidArgument("tensor " + p.name + " in " + checkpoint.path().string() + " has dtype " +
                             std::string(DTypeName(info.dtype)) + ", expected a float type");
    }
    DFLASH_ASSIGN_OR_RETURN(torch::Tensor t, nn::ReadTensor(checkpoint, p.name, p.shape, torch::kCPU, torch::kFloat));
    return t;
  });
}

}  // namespace dflash::trainer
