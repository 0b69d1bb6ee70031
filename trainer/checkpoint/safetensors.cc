#include "trainer/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

namespace dflash::trainer {
namespace {

using json = nlohmann::json;

// Parses JSON text rejecting duplicate keys in any object (nlohmann would silently keep one of them).
Result<json> ParseJsonStrict(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto cb = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string key = parsed.get<std::string>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {
    return Corruption(what + " is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) return Corruption(what + " names \"" + duplicate + "\" twice");
  return j;
}

std::uint64_t LoadLe64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Result<TensorInfo> ParseEntry(const std::string& name, const json& e, const std::string& where) {
  const std::string ctx = where + ": tensor \"" + name + "\"";
  if (name.empty()) return Corruption(where + ": a tensor has an empty name");
  if (!e.is_object()) return Corruption(ctx + ": entry is not a JSON object");
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      return Corruption(ctx + ": unknown field \"" + it.key() + "\"");
    }
  }
  TensorInfo t;
  t.name = name;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return Corruption(ctx + ": \"dtype\" missing or not a string");
  auto parsed = ParseDType(dt->get<std::string>());
  if (!parsed) return Unsupported(ctx + ": unsupported dtype \"" + dt->get<std::string>() + "\"");
  t.dtype = *parsed;
  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) return Corruption(ctx + ": \"shape\" missing or not an array");
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) return Corruption(ctx + ": \"shape\" holds a non-integer or negative dimension");
    const auto v = d.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(INT64_MAX)) return Corruption(ctx + ": dimension too large");
    t.shape.push_back(static_cast<std::int64_t>(v));
  }
  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return Corruption(ctx + ": \"data_offsets\" must be [begin, end] of non-negative integers");
  }
  t.data_begin = (*off)[0].get<std::uint64_t>();
  t.data_end = (*off)[1].get<std::uint64_t>();
  if (t.data_end < t.data_begin) {
    return Corruption(ctx + ": data_offsets [" + std::to_string(t.data_begin) + ", " + std::to_string(t.data_end) +
                      "] end before they begin");
  }
  auto bytes = NumBytes(t.dtype, t.shape);
  if (!bytes) return Corruption(ctx + ": shape " + ShapeToString(t.shape) + " overflows");
  if (*bytes != t.num_bytes()) {
    return Corruption(ctx + ": dtype " + std::string(DTypeName(t.dtype)) + " × shape " + ShapeToString(t.shape) +
                      " is " + std::to_string(*bytes) + " bytes but data_offsets [" + std::to_string(t.data_begin) +
                      ", " + std::to_string(t.data_end) + "] span " + std::to_string(t.num_bytes()));
  }
  return t;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::Open(const std::filesystem::path& path) {
  const std::string where = path.string();
  SafetensorsFile f;
  DFLASH_ASSIGN_OR_RETURN(f.file_, PosixFile::OpenReadOnly(path));
  DFLASH_ASSIGN_OR_RETURN(std::uint64_t size, f.file_.Size());
  if (size < 8) return Corruption(where + ": " + std::to_string(size) + " bytes, too short for a safetensors header");
  unsigned char len_bytes[8];
  DFLASH_RETURN_IF_ERROR(f.file_.ReadAt(0, std::as_writable_bytes(std::span(len_bytes))));
  const std::uint64_t n = LoadLe64(len_bytes);
  if (n > kMaxSafetensorsHeaderBytes) {
    return Corruption(where + ": header length " + std::to_string(n) + " exceeds the " +
                      std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (n > size - 8) {
    return Corruption(where + ": header length " + std::to_string(n) + " runs past the end of the " +
                      std::to_string(size) + "-byte file (truncated?)");
  }
  if (n < 2) return Corruption(where + ": header length " + std::to_string(n) + " is too short for a JSON object");
  std::string text(n, '\0');
  DFLASH_RETURN_IF_ERROR(f.file_.ReadAt(8, std::as_writable_bytes(std::span(text.data(), text.size()))));
  if (text.front() != '{') return Corruption(where + ": header does not start with '{'");
  DFLASH_ASSIGN_OR_RETURN(json header, ParseJsonStrict(text, where + " header"));
  if (!header.is_object()) return Corruption(where + ": header is not a JSON object");
  f.data_start_ = 8 + n;
  const std::uint64_t data_size = size - f.data_start_;

  std::vector<const TensorInfo*> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Corruption(where + ": __metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return Corruption(where + ": __metadata__ value of \"" + m.key() + "\" is not a string");
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    DFLASH_ASSIGN_OR_RETURN(TensorInfo t, ParseEntry(it.key(), *it, where));
    if (t.data_end > data_size) {
      return Corruption(where + ": tensor \"" + t.name + "\" data_offsets [" + std::to_string(t.data_begin) + ", " +
                        std::to_string(t.data_end) + "] run past the " + std::to_string(data_size) +
                        "-byte data buffer (truncated?)");
    }
    f.tensors_.emplace(t.name, std::move(t));
  }
  for (const auto& [name, t] : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->data_begin != b->data_begin ? a->data_begin < b->data_begin : a->data_end < b->data_end;
  });
  std::uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->data_begin < expected) {
      return Corruption(where + ": tensor \"" + t->name + "\" [" + std::to_string(t->data_begin) + ", " +
                        std::to_string(t->data_end) + ") overlaps tensor \"" + prev->name + "\" [" +
                        std::to_string(prev->data_begin) + ", " + std::to_string(prev->data_end) + ")");
    }
    if (t->data_begin > expected) {
      return Corruption(where + ": " + std::to_string(t->data_begin - expected) + " unindexed bytes before tensor \"" +
                        t->name + "\" at data offset " + std::to_string(expected));
    }
    expected = t->data_end;
    prev = t;
  }
  if (expected != data_size) {
    return Corruption(where + ": " + std::to_string(data_size - expected) +
                      " trailing bytes after the last tensor (data buffer is " + std::to_string(data_size) +
                      " bytes, tensors end at " + std::to_string(expected) + ")");
  }
  return f;
}

Result<TensorInfo> SafetensorsFile::Info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("tensor \"" + name + "\" not found in " + path().string());
  return it->second;
}

Status SafetensorsFile::Read(const std::string& name, std::span<std::byte> out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("tensor \"" + name + "\" not found in " + path().string());
  const TensorInfo& t = it->second;
  if (out.size() != t.num_bytes()) {
    return InvalidArgument("reading tensor \"" + name + "\" of " + path().string() + ": buffer is " +
                           std::to_string(out.size()) + " bytes, tensor is " + std::to_string(t.num_bytes()));
  }
  return file_.ReadAt(data_start_ + t.data_begin, out)
      .WithContext("reading tensor \"" + name + "\"");
}

}  // namespace dflash::trainer
