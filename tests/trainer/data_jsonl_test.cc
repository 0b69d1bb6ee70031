// JsonlDataset: streaming reads return exactly what was written; bad lines are named by file:line or skipped and
// counted.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "trainer/data/jsonl_dataset.h"

namespace dflash::trainer::data {
namespace {

using dflash::testing::TempDir;

std::string SampleJson(const Sample& s) {
  std::string out = "{\"input_ids\": [";
  for (std::size_t i = 0; i < s.input_ids.size(); ++i) out += (i ? "," : "") + std::to_string(s.input_ids[i]);
  out += "], \"loss_mask\": [";
  for (std::size_t i = 0; i < s.loss_mask.size(); ++i) out += (i ? "," : "") + std::to_string(s.loss_mask[i]);
  return out + "]}";
}

std::vector<Sample> RandomSamples(std::mt19937_64& rng, int n, int max_len) {
  std::vector<Sample> out(n);
  for (auto& s : out) {
    const int len = 1 + static_cast<int>(rng() % max_len);
    for (int i = 0; i < len; ++i) {
      s.input_ids.push_back(static_cast<std::int32_t>(rng() % 248320));
      s.loss_mask.push_back(static_cast<std::uint8_t>(rng() % 2));
    }
  }
  return out;
}

void WriteFile(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

TEST(JsonlDataset, ReadsEverySampleBackExactlyIgnoringBlankLinesAndCrlf) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const auto samples = RandomSamples(rng, 60, 50);
  std::string text = "\n";
  for (std::size_t i = 0; i < samples.size(); ++i) {
    text += SampleJson(samples[i]) + (i % 3 == 0 ? "\r\n" : "\n");
    if (i % 7 == 0) text += "   \n";
  }
  text.pop_back();  // last line without its '\n'
  const auto file = dir.path() / "d.jsonl";
  WriteFile(file, text);

  auto ds = JsonlDataset::Open(file);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->size(), samples.size());
  EXPECT_EQ(ds->skipped_lines(), 0u);
  std::uint64_t total = 0;
  for (std::size_t i = samples.size(); i-- > 0;) {  // backwards: reads are random access
    auto s = ds->Get(i);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->input_ids, samples[i].input_ids) << i;
    EXPECT_EQ(s->loss_mask, samples[i].loss_mask) << i;
    EXPECT_EQ(ds->tokens(i), samples[i].input_ids.size());
    total += samples[i].input_ids.size();
  }
  EXPECT_EQ(ds->total_tokens(), total);
  EXPECT_EQ(ds->entry(0).line, 2u);  // the first line is blank
  EXPECT_FALSE(ds->Get(samples.size()).ok());
}

TEST(JsonlDataset, AcceptsBooleanLossMaskAndIgnoresOtherKeys) {
  TempDir dir;
  const auto file = dir.path() / "d.jsonl";
  WriteFile(file, R"({"id": "x", "input_ids": [5, 6, 7], "loss_mask": [false, true, 1]})" "\n");
  auto ds = JsonlDataset::Open(file);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto s = ds->Get(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->input_ids, (std::vector<std::int32_t>{5, 6, 7}));
  EXPECT_EQ(s->loss_mask, (std::vector<std::uint8_t>{0, 1, 1}));
}

const std::vector<std::pair<std::string, std::string>>& BadLines() {
  static const std::vector<std::pair<std::string, std::string>> lines = {
      {R"({"input_ids": [1, 2], "loss_mask": [1, 0)", "not valid JSON"},
      {R"({"loss_mask": [1]})", "missing key \"input_ids\""},
      {R"({"input_ids": [1]})", "missing key \"loss_mask\""},
      {R"({"input_ids": [1, 2, 3], "loss_mask": [1, 0]})", "has 3 tokens but \"loss_mask\" has 2"},
      {R"({"input_ids": [1, 2], "loss_mask": [1, 2]})", "loss_mask[1] = 2 is not 0 or 1"},
      {R"({"input_ids": [1, -2], "loss_mask": [1, 1]})", "input_ids[1] = -2 is not a token id"},
      {R"({"input_ids": [1, 2.5], "loss_mask": [1, 1]})", "input_ids[1] is not an integer"},
      {R"({"input_ids": [1, 4294967296], "loss_mask": [1, 1]})", "is not a token id"},
      {R"({"input_ids": [], "loss_mask": []})", "empty sample"},
      {R"({"input_ids": "1 2", "loss_mask": [1]})", "\"input_ids\" is not an array"},
      {R"([1, 2])", "expected a JSON object"},
  };
  return lines;
}

TEST(JsonlDataset, BadLineFailsOpenWithFileLineAndReason) {
  TempDir dir;
  const std::string good = R"({"input_ids": [1, 2], "loss_mask": [0, 1]})";
  for (const auto& [bad, reason] : BadLines()) {
    const auto file = dir.path() / "bad.jsonl";
    WriteFile(file, good + "\n\n" + good + "\n" + bad + "\n" + good + "\n");
    auto ds = JsonlDataset::Open(file);
    ASSERT_FALSE(ds.ok()) << bad;
    EXPECT_EQ(ds.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(ds.status().message().find(file.string() + ":4: "), std::string::npos) << ds.status().message();
    EXPECT_NE(ds.status().message().find(reason), std::string::npos) << ds.status().message();
    EXPECT_EQ(ds.status().message().find('\n'), std::string::npos) << "one readable line";
  }
}

TEST(JsonlDataset, SkipBadLinesKeepsTheGoodOnesAndCountsTheBad) {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const auto samples = RandomSamples(rng, 30, 20);
  std::string text;
  std::size_t bad_written = 0;
  std::vector<std::uint64_t> good_lines;
  std::uint64_t line = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (rng() % 2 == 0) {
      text += BadLines()[rng() % BadLines().size()].first + "\n";
      ++line;
      ++bad_written;
    }
    text += SampleJson(samples[i]) + "\n";
    good_lines.push_back(++line);
  }
  const auto file = dir.path() / "mixed.jsonl";
  WriteFile(file, text);
  JsonlOptions opt;
  opt.skip_bad_lines = true;
  opt.max_kept_errors = 3;
  auto ds = JsonlDataset::Open(file, opt);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->skipped_lines(), bad_written);
  EXPECT_EQ(ds->skipped_errors().size(), std::min<std::size_t>(3, bad_written));
  ASSERT_EQ(ds->size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(ds->entry(i).line, good_lines[i]);
    auto s = ds->Get(i);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->input_ids, samples[i].input_ids);
  }
  // Without the option the same file is refused.
  EXPECT_EQ(bad_written == 0, JsonlDataset::Open(file).ok());
}

TEST(JsonlDataset, MissingFileIsNotFoundAndAFileWithoutSamplesIsRefused) {
  TempDir dir;
  auto missing = JsonlDataset::Open(dir.path() / "nope.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);

  const auto empty = dir.path() / "empty.jsonl";
  WriteFile(empty, "\n  \n");
  EXPECT_FALSE(JsonlDataset::Open(empty).ok());

  const auto all_bad = dir.path() / "bad.jsonl";
  WriteFile(all_bad, "{}\n");
  JsonlOptions opt;
  opt.skip_bad_lines = true;
  auto ds = JsonlDataset::Open(all_bad, opt);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("no usable sample"), std::string::npos);
}

TEST(JsonlDataset, FileRewrittenAfterOpenIsReportedNotMisread) {
  TempDir dir;
  const auto file = dir.path() / "d.jsonl";
  WriteFile(file, R"({"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]})" "\n");
  auto ds = JsonlDataset::Open(file);
  ASSERT_TRUE(ds.ok());
  // Same inode rewritten in place with a different sample (the trainer must not silently train on it).
  WriteFile(file, R"({"input_ids": [1, 2], "loss_mask": [1, 1]}     )" "\n");
  auto s = ds->Get(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(s.status().message().find(file.string() + ":1"), std::string::npos);
}

}  // namespace
}  // namespace dflash::trainer::data
