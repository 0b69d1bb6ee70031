#include "trainer/train/train_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <system_error>
#include <vector>

#include "base/atomic_file.h"
#include "trainer/nn/tensor_io.h"

namespace dflash::trainer {
namespace fs = std::filesystem;
namespace {

constexpr char kStatePrefix[] = "step-";

std::string StepName(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kStatePrefix, static_cast<long long>(step));
  return buf;
}

// Complete checkpoint folders (step-N, no suffix), oldest first.
std::vector<fs::path> CompleteCheckpoints(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind(kStatePrefix, 0) == 0 && name.find('.') == std::string::npos) {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<nlohmann::json> ReadJson(const fs::path& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot open " + path.string());
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corruption(path.string() + " is not a JSON object");
  return j;
}

}  // namespace

Result<fs::path> SaveTrainCheckpoint(const fs::path& output_dir, const Drafter& drafter, const AdamW& optimizer,
                                     const TrainState& state, int keep) {
  const fs::path root = output_dir / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return IoError("cannot create " + root.string() + ": " + ec.message());
  // Leftovers of an interrupted save.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().extension() == ".partial") fs::remove_all(entry.path(), ec);
  }
  const fs::path final_dir = root / StepName(state.step);
  const fs::path partial = root / (StepName(state.step) + ".partial");
  fs::create_directories(partial, ec);
  if (ec) return IoError("cannot create " + partial.string() + ": " + ec.message());

  DFLASH_RETURN_IF_ERROR(drafter.Save(partial / "drafter"));
  DFLASH_RETURN_IF_ERROR(nn::SaveTensors(partial / "master.safetensors", drafter.named_parameters(), torch::kFloat));
  DFLASH_RETURN_IF_ERROR(nn::SaveTensors(partial / "optimizer.safetensors", optimizer.StateTensors(), torch::kFloat));
  const nlohmann::json j = {{"step", state.step},
                            {"optimizer_step", optimizer.step()},
                            {"batcher", state.batcher.ToJson()},
                            {"options", state.options},
                            {"progress", state.progress}};
  DFLASH_RETURN_IF_ERROR(AtomicWriteText(partial / "state.json", j.dump(2) + "\n"));

  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // the same step saved again (e.g. final == periodic)
  fs::rename(partial, final_dir, ec);
  if (ec) return IoError("cannot rename " + partial.string() + " to " + final_dir.string() + ": " + ec.message());
  DFLASH_RETURN_IF_ERROR(FsyncDirectory(root));
  DFLASH_RETURN_IF_ERROR(AtomicWriteText(root / "latest", final_dir.filename().string() + "\n"));

  auto complete = CompleteCheckpoints(root);
  for (std::size_t i = 0; keep > 0 && i + static_cast<std::size_t>(keep) < complete.size(); ++i) {
    if (complete[i] != final_dir) fs::remove_all(complete[i], ec);
  }
  return final_dir;
}

Result<fs::path> LatestCheckpoint(const fs::path& output_dir) {
  const fs::path root = output_dir / "checkpoints";
  std::ifstream f(root / "latest");
  if (!f) return NotFound("no checkpoint in " + root.string() + " (no 'latest' file)");
  std::string name;
  std::getline(f, name);
  const fs::path dir = root / name;
  if (name.empty() || !fs::is_directory(dir)) {
    return Corruption(root.string() + "/latest names '" + name + "', which is not a checkpoint folder");
  }
  return dir;
}

Result<TrainState> LoadTrainCheckpoint(const fs::path& checkpoint_dir, Drafter& drafter, AdamW& optimizer) {
  DFLASH_ASSIGN_OR_RETURN(auto j, ReadJson(checkpoint_dir / "state.json"));
  TrainState state;
  std::int64_t optimizer_step = 0;
  try {
    state.step = j.at("step").get<std::int64_t>();
    optimizer_step = j.at("optimizer_step").get<std::int64_t>();
    state.options = j.at("options");
    state.progress = j.value("progress", nlohmann::json::object());
    DFLASH_ASSIGN_OR_RETURN(state.batcher, data::BatcherState::FromJson(j.at("batcher")));
  } catch (const nlohmann::json::exception& e) {
    return Corruption((checkpoint_dir / "state.json").string() + ": " + e.what());
  }
  DFLASH_ASSIGN_OR_RETURN(auto masters, nn::ReadAllTensors(checkpoint_dir / "master.safetensors", torch::kCPU));
  std::map<std::string, torch::Tensor> by_name(masters.begin(), masters.end());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : drafter.named_parameters()) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return NotFound("master weight " + name + " missing in " + checkpoint_dir.string());
      if (it->second.sizes() != p.sizes()) {
        return InvalidArgument("master weight " + name + " in " + checkpoint_dir.string() + " has the wrong shape");
      }
      p.copy_(it->second);
    }
  }
  DFLASH_ASSIGN_OR_RETURN(auto moments, nn::ReadAllTensors(checkpoint_dir / "optimizer.safetensors", torch::kCPU));
  DFLASH_RETURN_IF_ERROR(optimizer.LoadState(moments, optimizer_step)
                             .WithContext("loading " + (checkpoint_dir / "optimizer.safetensors").string()));
  return state;
}

}  // namespace dflash::trainer
