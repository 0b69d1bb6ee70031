#include "trainer/checkpoint/checkpoint.h"

#include <fstream>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

namespace dflash::trainer {
namespace {

using json = nlohmann::json;

Result<json> ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + path.string());
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    return Corruption(path.string() + " is not valid JSON: " + e.what());
  }
}

// A shard name from an index must stay inside the checkpoint folder.
bool IsPlainRelative(const std::string& file) {
  if (file.empty()) return false;
  std::filesystem::path p(file);
  if (p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::filesystem::path& path) {
  std::error_code ec;
  Checkpoint ckpt;
  ckpt.path_ = path;
  if (!std::filesystem::exists(path, ec)) return NotFound("checkpoint " + path.string() + " does not exist");

  std::filesystem::path single;
  std::filesystem::path index;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / kSafetensorsIndexName, ec)) {
      index = path / kSafetensorsIndexName;
    } else if (std::filesystem::exists(path / kSingleSafetensorsName, ec)) {
      single = path / kSingleSafetensorsName;
    } else {
      return NotFound("checkpoint folder " + path.string() + " holds neither " + kSafetensorsIndexName + " nor " +
                      kSingleSafetensorsName);
    }
  } else if (path.filename() == kSafetensorsIndexName) {
    index = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    DFLASH_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single));
    for (const auto& [name, t] : f.tensors()) ckpt.where_[name] = 0;
    ckpt.shards_.push_back(std::move(f));
    return ckpt;
  }

  const std::string where = index.string();
  DFLASH_ASSIGN_OR_RETURN(json j, ReadJsonFile(index));
  if (!j.is_object()) return Corruption(where + ": not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return Corruption(where + ": \"weight_map\" missing or not an object");
  if (wm->empty()) return Corruption(where + ": \"weight_map\" is empty");
  std::map<std::string, std::size_t> shard_of_file;
  const std::filesystem::path dir = index.parent_path();
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) return Corruption(where + ": weight_map entry of \"" + it.key() + "\" is not a string");
    const std::string file = it->get<std::string>();
    if (!IsPlainRelative(file)) {
      return Corruption(where + ": tensor \"" + it.key() + "\" maps to \"" + file +
                        "\", which is not a file name inside the checkpoint folder");
    }
    auto [slot, inserted] = shard_of_file.emplace(file, ckpt.shards_.size());
    if (inserted) {
      auto shard = SafetensorsFile::Open(dir / file);
      if (!shard.ok()) {
        if (shard.status().code() == ErrorCode::kNotFound) {
          return NotFound(where + ": shard \"" + file + "\" (holding tensor \"" + it.key() + "\") is missing");
        }
        return shard.status();
      }
      ckpt.shards_.push_back(std::move(shard).value());
    }
    const SafetensorsFile& shard = ckpt.shards_[slot->second];
    if (!shard.Has(it.key())) {
      return Corruption(where + ": index maps tensor \"" + it.key() + "\" to \"" + file + "\", which has no such tensor");
    }
    ckpt.where_[it.key()] = slot->second;
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, shard] : where_) names.push_back(name);
  return names;
}

Result<TensorInfo> Checkpoint::Info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return NotFound("tensor \"" + name + "\" not found in checkpoint " + path_.string());
  return shards_[it->second].Info(name);
}

Result<std::filesystem::path> Checkpoint::FileOf(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return NotFound("tensor \"" + name + "\" not found in checkpoint " + path_.string());
  return shards_[it->second].path();
}

Status Checkpoint::Read(const std::string& name, std::span<std::byte> out) const {
  auto it = where_.find(name);
  if (it == where_.end()) return NotFound("tensor \"" + name + "\" not found in checkpoint " + path_.string());
  return shards_[it->second].Read(name, out);
}

Result<std::vector<std::byte>> Checkpoint::Read(const std::string& name) const {
  DFLASH_ASSIGN_OR_RETURN(TensorInfo info, Info(name));
  std::vector<std::byte> bytes(info.num_bytes());
  DFLASH_RETURN_IF_ERROR(Read(name, std::span(bytes)));
  return bytes;
}

Status Checkpoint::Expect(const std::string& name, DType dtype, std::span<const std::int64_t> shape) const {
  return Expect(TensorSpec{name, std::vector<std::int64_t>(shape.begin(), shape.end()), dtype});
}

Status Checkpoint::Expect(const TensorSpec& spec) const {
  DFLASH_ASSIGN_OR_RETURN(TensorInfo info, Info(spec.name));
  if (info.shape != spec.shape) {
    return InvalidArgument("tensor " + spec.name + " has shape " + ShapeToString(info.shape) + ", expected " +
                           ShapeToString(spec.shape));
  }
  if (spec.dtype && info.dtype != *spec.dtype) {
    return InvalidArgument("tensor " + spec.name + " has dtype " + std::string(DTypeName(info.dtype)) +
                           ", expected " + std::string(DTypeName(*spec.dtype)));
  }
  return Status::Ok();
}

Status Checkpoint::CheckTensors(std::span<const TensorSpec> specs) const {
  std::vector<std::string> problems;
  bool any_missing = false;
  for (const TensorSpec& spec : specs) {
    Status st = Expect(spec);
    if (!st.ok()) {
      any_missing |= st.code() == ErrorCode::kNotFound;
      problems.push_back(st.message());
    }
  }
  if (problems.empty()) return Status::Ok();
  std::string msg = std::to_string(problems.size()) + " of " + std::to_string(specs.size()) +
                    " tensors do not match checkpoint " + path_.string() + ": ";
  constexpr std::size_t kShown = 8;
  for (std::size_t i = 0; i < problems.size() && i < kShown; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > kShown) msg += "; and " + std::to_string(problems.size() - kShown) + " more";
  return Status(any_missing ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument, msg);
}

}  // namespace dflash::trainer
