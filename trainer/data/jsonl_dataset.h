// JsonlDataset: a tokenized training set stored as JSON Lines, read on demand.
// Format (one sample per line, UTF-8, '\n' or "\r\n" line ends):
//   {"input_ids": [int, ...], "loss_mask": [0|1, ...]}
// input_ids are token ids in [0, 2^31); loss_mask holds 0/1 (or false/true), one per token, 1 on the tokens the
// drafter is trained to predict (assistant tokens). Both arrays have the same, non-zero length. Other keys are
// ignored. Blank (whitespace-only) lines are ignored and are not samples. Line numbers in errors are 1-based.
// Owns: the open file and an index built once at Open (byte offset, byte size, line number and token count of every
// good line). Samples are parsed from the file only when asked for, so memory is O(lines), not O(tokens).
// Who may call: the trainer's data path (Batcher) and tools. Thread-safety: after Open, Get and the accessors are
// const and safe from any number of threads (positioned reads, no shared file offset). Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace dflash::trainer::data {

struct Sample {
  std::vector<std::int32_t> input_ids;
  std::vector<std::uint8_t> loss_mask;  // 0 or 1, same length as input_ids
};

struct JsonlOptions {
  // false: the first bad line fails Open with "<file>:<line>: <what>". true: bad lines are skipped and counted.
  bool skip_bad_lines = false;
  // How many skipped-line messages to keep for reporting (the count is always exact).
  std::size_t max_kept_errors = 20;
};

// Parses one line of the format above. `where` ("file:line") prefixes the error message.
Result<Sample> ParseSampleLine(const std::string& line, const std::string& where);

class JsonlDataset {
 public:
  struct IndexEntry {
    std::uint64_t offset = 0;    // byte offset of the line in the file
    std::uint32_t bytes = 0;     // length of the line without its line end
    std::uint32_t tokens = 0;    // number of tokens of the sample
    std::uint64_t line = 0;      // 1-based line number
  };

  // Reads the file once to index and validate every line. Errors: NotFound / IoError for the file,
  // InvalidArgument "<file>:<line>: ..." for a bad line (unless skipping), InvalidArgument when no sample is left.
  static Result<JsonlDataset> Open(const std::filesystem::path& file, const JsonlOptions& options = {});

  JsonlDataset(JsonlDataset&& other) noexcept;
  JsonlDataset& operator=(JsonlDataset&& other) noexcept;
  JsonlDataset(const JsonlDataset&) = delete;
  JsonlDataset& operator=(const JsonlDataset&) = delete;
  ~JsonlDataset();

  std::size_t size() const { return index_.size(); }
  const IndexEntry& entry(std::size_t i) const { return index_[i]; }
  std::uint32_t tokens(std::size_t i) const { return index_[i].tokens; }
  std::uint64_t total_tokens() const { return total_tokens_; }
  std::size_t skipped_lines() const { return skipped_lines_; }
  // The first max_kept_errors "<file>:<line>: <what>" messages of skipped lines.
  const std::vector<std::string>& skipped_errors() const { return skipped_errors_; }
  const std::filesystem::path& path() const { return path_; }
  std::uint64_t file_bytes() const { return file_bytes_; }

  // Reads and parses sample i (0-based among good lines). Errors: InvalidArgument for i out of range, IoError for a
  // failed read, Corruption "<file>:<line>: ..." when the file changed since Open.
  Result<Sample> Get(std::size_t i) const;

 private:
  JsonlDataset() = default;
  int fd_ = -1;
  std::filesystem::path path_;
  std::vector<IndexEntry> index_;
  std::uint64_t total_tokens_ = 0;
  std::uint64_t file_bytes_ = 0;
  std::size_t skipped_lines_ = 0;
  std::vector<std::string> skipped_errors_;
};

}  // namespace dflash::trainer::data
