#include "trainer/data/jsonl_dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace dflash::trainer::data {
namespace {

bool IsBlank(const std::string& s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

}  // namespace

Result<Sample> ParseSampleLine(const std::string& line, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) return InvalidArgument(where + ": expected a JSON object with input_ids and loss_mask");
  auto ids = j.find("input_ids");
  auto mask = j.find("loss_mask");
  if (ids == j.end()) return InvalidArgument(where + ": missing key \"input_ids\"");
  if (mask == j.end()) return InvalidArgument(where + ": missing key \"loss_mask\"");
  if (!ids->is_array()) return InvalidArgument(where + ": \"input_ids\" is not an array");
  if (!mask->is_array()) return InvalidArgument(where + ": \"loss_mask\" is not an array");
  if (ids->size() != mask->size()) {
    return InvalidArgument(where + ": \"input_ids\" has " + std::to_string(ids->size()) + " tokens but \"loss_mask\" has " +
                           std::to_string(mask->size()));
  }
  if (ids->empty()) return InvalidArgument(where + ": empty sample (no tokens)");
  if (ids->size() > std::numeric_limits<std::uint32_t>::max()) return InvalidArgument(where + ": sample too long");
  Sample s;
  s.input_ids.reserve(ids->size());
  s.loss_mask.reserve(ids->size());
  for (std::size_t i = 0; i < ids->size(); ++i) {
    const auto& v = (*ids)[i];
    if (!v.is_number_integer()) {
      return InvalidArgument(where + ": input_ids[" + std::to_string(i) + "] is not an integer");
    }
    // is_number_integer covers both signed and unsigned storage; compare in the matching type.
    const bool in_range = v.is_number_unsigned()
                              ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT32_MAX)
                              : (v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= INT32_MAX);
    if (!in_range) {
      return InvalidArgument(where + ": input_ids[" + std::to_string(i) + "] = " + v.dump() +
                             " is not a token id in [0, 2^31)");
    }
    s.input_ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
    const auto& m = (*mask)[i];
    if (m.is_boolean()) {
      s.loss_mask.push_back(m.get<bool>() ? 1 : 0);
    } else if (m.is_number_integer() && (m.get<std::int64_t>() == 0 || m.get<std::int64_t>() == 1)) {
      s.loss_mask.push_back(static_cast<std::uint8_t>(m.get<std::int64_t>()));
    } else {
      return InvalidArgument(where + ": loss_mask[" + std::to_string(i) + "] = " + m.dump() + " is not 0 or 1");
    }
  }
  return s;
}

Result<JsonlDataset> JsonlDataset::Open(const std::filesystem::path& file, const JsonlOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return NotFound("dataset " + file.string() + " does not exist");
  if (std::filesystem::is_directory(file, ec)) return InvalidArgument("dataset " + file.string() + " is a directory");
  std::ifstream in(file, std::ios::binary);
  if (!in) return IoError("cannot open dataset " + file.string() + ": " + std::strerror(errno));

  JsonlDataset ds;
  ds.path_ = file;
  std::string line;
  std::uint64_t offset = 0;
  std::uint64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::uint64_t line_offset = offset;
    offset += line.size() + (in.eof() ? 0 : 1);  // the '\n' getline consumed, if any
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (IsBlank(line)) continue;
    const std::string where = file.string() + ":" + std::to_string(line_no);
    if (line.size() > std::numeric_limits<std::uint32_t>::max()) {
      Status st = InvalidArgument(where + ": line longer than 4 GiB");
      if (!options.skip_bad_lines) return st;
      ++ds.skipped_lines_;
      if (ds.skipped_errors_.size() < options.max_kept_errors) ds.skipped_errors_.push_back(st.message());
      continue;
    }
    auto sample = ParseSampleLine(line, where);
    if (!sample.ok()) {
      if (!options.skip_bad_lines) return sample.status();
      ++ds.skipped_lines_;
      if (ds.skipped_errors_.size() < options.max_kept_errors) ds.skipped_errors_.push_back(sample.status().message());
      continue;
    }
    IndexEntry e;
    e.offset = line_offset;
    e.bytes = static_cast<std::uint32_t>(line.size());
    e.tokens = static_cast<std::uint32_t>(sample->input_ids.size());
    e.line = line_no;
    ds.total_tokens_ += e.tokens;
    ds.index_.push_back(e);
  }
  if (in.bad()) return IoError("reading dataset " + file.string() + " failed: " + std::strerror(errno));
  ds.file_bytes_ = offset;
  if (ds.index_.empty()) {
    return InvalidArgument("dataset " + file.string() + " holds no usable sample (" + std::to_string(ds.skipped_lines_) +
                           " bad lines skipped)");
  }
  ds.fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (ds.fd_ < 0) return IoError("cannot open dataset " + file.string() + ": " + std::strerror(errno));
  return ds;
}

JsonlDataset::JsonlDataset(JsonlDataset&& other) noexcept
    : fd_(other.fd_),
      path_(std::move(other.path_)),
      index_(std::move(other.index_)),
      total_tokens_(other.total_tokens_),
      file_bytes_(other.file_bytes_),
      skipped_lines_(other.skipped_lines_),
      skipped_errors_(std::move(other.skipped_errors_)) {
  other.fd_ = -1;
}

JsonlDataset& JsonlDataset::operator=(JsonlDataset&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
    path_ = std::move(other.path_);
    index_ = std::move(other.index_);
    total_tokens_ = other.total_tokens_;
    file_bytes_ = other.file_bytes_;
    skipped_lines_ = other.skipped_lines_;
    skipped_errors_ = std::move(other.skipped_errors_);
  }
  return *this;
}

JsonlDataset::~JsonlDataset() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Sample> JsonlDataset::Get(std::size_t i) const {
  if (i >= index_.size()) {
    return InvalidArgument("sample " + std::to_string(i) + " out of range (dataset has " + std::to_string(index_.size()) +
                           ")");
  }
  const IndexEntry& e = index_[i];
  const std::string where = path_.string() + ":" + std::to_string(e.line);
  std::string line(e.bytes, '\0');
  std::size_t done = 0;
  while (done < e.bytes) {
    const ssize_t n = ::pread(fd_, line.data() + done, e.bytes - done, static_cast<off_t>(e.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(where + ": read failed: " + std::strerror(errno));
    }
    if (n == 0) return Corruption(where + ": file shorter than when it was indexed (changed since Open?)");
    done += static_cast<std::size_t>(n);
  }
  auto sample = ParseSampleLine(line, where);
  if (!sample.ok()) return Corruption(sample.status().message() + " (file changed since Open?)");
  if (sample->input_ids.size() != e.tokens) return Corruption(where + ": token count changed since Open");
  return sample;
}

}  // namespace dflash::trainer::data
