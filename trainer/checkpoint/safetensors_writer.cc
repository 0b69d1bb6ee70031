#include "trainer/checkpoint/safetensors_writer.h"

#include <algorithm>
#include <set>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"

namespace dflash::trainer {

Status WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& extra_metadata) {
  const std::string where = "writing " + path.string();
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) return InvalidArgument(where + ": a tensor has an empty name");
    if (t.name == "__metadata__") return InvalidArgument(where + ": \"__metadata__\" is reserved, not a tensor name");
    if (!names.insert(t.name).second) return InvalidArgument(where + ": tensor \"" + t.name + "\" given twice");
    auto bytes = NumBytes(t.dtype, t.shape);
    if (!bytes) return InvalidArgument(where + ": tensor \"" + t.name + "\" has an invalid shape " + ShapeToString(t.shape));
    if (*bytes != t.data.size()) {
      return InvalidArgument(where + ": tensor \"" + t.name + "\" is " + std::string(DTypeName(t.dtype)) + " " +
                             ShapeToString(t.shape) + " = " + std::to_string(*bytes) + " bytes but " +
                             std::to_string(t.data.size()) + " bytes were given");
    }
  }
  if (extra_metadata.count("format")) return InvalidArgument(where + ": metadata key \"format\" is fixed to \"pt\"");

  std::vector<const TensorToWrite*> order;
  for (const TensorToWrite& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const auto sa = DTypeSize(a->dtype), sb = DTypeSize(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : extra_metadata) meta[k] = v;
  header["__metadata__"] = meta;
  std::uint64_t offset = 0;
  for (const TensorToWrite* t : order) {
    header[t->name] = {{"dtype", std::string(DTypeName(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->data.size()}}};
    offset += t->data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::byte len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xff);

  return AtomicWriteFile(path, [&](const ByteSink& sink) -> Status {
    DFLASH_RETURN_IF_ERROR(sink(std::span<const std::byte>(len, 8)));
    DFLASH_RETURN_IF_ERROR(sink(std::as_bytes(std::span(text.data(), text.size()))));
    for (const TensorToWrite* t : order) DFLASH_RETURN_IF_ERROR(sink(t->data));
    return Status::Ok();
  });
}

}  // namespace dflash::trainer
