// Writer + reader round trips of single-file checkpoints, Expect()/CheckTensors() messages, atomic publishing.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/trainer/checkpoint_test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/safetensors.h"
#include "trainer/checkpoint/safetensors_writer.h"

namespace dflash::trainer {
namespace {

using testing::RandomBytes;
using testing::ReadFile;
using testing::TempDir;

struct Owned {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;
};

std::vector<Owned> SampleTensors(std::uint64_t seed) {
  std::vector<Owned> t;
  auto add = [&](std::string name, DType dt, std::vector<std::int64_t> shape) {
    const std::size_t n = *NumBytes(dt, shape);
    t.push_back({std::move(name), dt, std::move(shape), RandomBytes(n, seed + t.size())});
  };
  add("model.embed_tokens.weight", DType::kBF16, {7, 5});
  add("layers.0.self_attn.q_proj.weight", DType::kBF16, {6, 5});
  add("layers.0.mlp.down_proj.weight", DType::kF16, {5, 3});
  add("norm.weight", DType::kF32, {5});
  add("A_log", DType::kF32, {3});
  add("step", DType::kI64, {});
  add("empty", DType::kBF16, {0, 4});
  add("mask", DType::kU8, {3});
  return t;
}

std::vector<TensorToWrite> Views(const std::vector<Owned>& owned) {
  std::vector<TensorToWrite> v;
  for (const auto& o : owned) v.push_back({o.name, o.dtype, o.shape, std::span(o.data)});
  return v;
}

TEST(SafetensorsRoundTrip, SingleFileReadsBackBitExactWithInfo) {
  TempDir dir;
  const auto owned = SampleTensors(1);
  const auto views = Views(owned);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "model.safetensors", views).ok());

  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->num_shards(), 1u);
  EXPECT_EQ(ckpt->Names().size(), owned.size());
  for (const auto& o : owned) {
    ASSERT_TRUE(ckpt->Has(o.name)) << o.name;
    auto info = ckpt->Info(o.name);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->dtype, o.dtype) << o.name;
    EXPECT_EQ(info->shape, o.shape) << o.name;
    auto bytes = ckpt->Read(o.name);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, o.data) << o.name;
    // Into a caller's buffer poisoned beforehand.
    std::vector<std::byte> out(o.data.size(), std::byte{0xAB});
    ASSERT_TRUE(ckpt->Read(o.name, std::span(out)).ok());
    EXPECT_EQ(out, o.data) << o.name;
  }
  EXPECT_FALSE(ckpt->Has("missing"));
}

TEST(SafetensorsRoundTrip, OpeningTheFileDirectlyEqualsOpeningTheFolder) {
  TempDir dir;
  const auto owned = SampleTensors(2);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "drafter.safetensors", Views(owned)).ok());
  auto ckpt = Checkpoint::Open(dir.path() / "drafter.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(*ckpt->Read("norm.weight"), owned[3].data);
}

TEST(SafetensorsWriter, HeaderHasFormatPtMetadataIsPaddedAndTensorsAligned) {
  TempDir dir;
  const auto owned = SampleTensors(3);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "m.safetensors", Views(owned), {{"step", "12"}}).ok());
  const std::string raw = ReadFile(dir.path() / "m.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);  // little-endian host
  EXPECT_EQ(n % 8, 0u);
  auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["__metadata__"]["step"], "12");

  auto f = SafetensorsFile::Open(dir.path() / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  for (const auto& [name, t] : f->tensors()) {
    EXPECT_EQ((8 + n + t.data_begin) % DTypeSize(t.dtype), 0u) << name;
  }
}

TEST(SafetensorsWriter, RejectsBadInputAndLeavesNoFile) {
  TempDir dir;
  const auto data = RandomBytes(8, 4);
  const auto path = dir.path() / "bad.safetensors";
  std::vector<TensorToWrite> wrong_size = {{"a", DType::kF32, {3}, std::span(data)}};
  Status st = WriteSafetensors(path, wrong_size);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"a\""), std::string::npos) << st.message();
  std::vector<TensorToWrite> dup = {{"a", DType::kF32, {2}, std::span(data)}, {"a", DType::kF32, {2}, std::span(data)}};
  EXPECT_EQ(WriteSafetensors(path, dup).code(), ErrorCode::kInvalidArgument);
  std::vector<TensorToWrite> reserved = {{"__metadata__", DType::kF32, {2}, std::span(data)}};
  EXPECT_EQ(WriteSafetensors(path, reserved).code(), ErrorCode::kInvalidArgument);
  std::vector<TensorToWrite> ok = {{"a", DType::kF32, {2}, std::span(data)}};
  EXPECT_EQ(WriteSafetensors(path, ok, {{"format", "np"}}).code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SafetensorsWriter, OverwriteReplacesWholeFileAndLeavesNoTemporaries) {
  TempDir dir;
  const auto path = dir.path() / "model.safetensors";
  const auto first = SampleTensors(5);
  ASSERT_TRUE(WriteSafetensors(path, Views(first)).ok());
  const auto a = RandomBytes(4, 6);
  std::vector<TensorToWrite> second = {{"only", DType::kF32, {1}, std::span(a)}};
  ASSERT_TRUE(WriteSafetensors(path, second).ok());
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->Names(), std::vector<std::string>{"only"});
  EXPECT_EQ(*ckpt->Read("only"), a);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1);
}

TEST(SafetensorsWriter, FailsWithIoErrorIntoMissingFolder) {
  TempDir dir;
  const auto a = RandomBytes(4, 7);
  std::vector<TensorToWrite> t = {{"x", DType::kF32, {1}, std::span(a)}};
  EXPECT_EQ(WriteSafetensors(dir.path() / "no" / "such" / "m.safetensors", t).code(), ErrorCode::kIoError);
}

TEST(CheckpointRead, WrongBufferSizeIsInvalidArgumentAndMissingIsNotFound) {
  TempDir dir;
  const auto owned = SampleTensors(8);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "model.safetensors", Views(owned)).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<std::byte> small(3);
  Status st = ckpt->Read("norm.weight", std::span(small));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("norm.weight"), std::string::npos);
  auto missing = ckpt->Read("nope");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("\"nope\""), std::string::npos);
}

TEST(CheckpointExpect, MessagesNameTensorShapeAndDtype) {
  TempDir dir;
  const auto owned = SampleTensors(9);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "model.safetensors", Views(owned)).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const std::vector<std::int64_t> right = {7, 5}, wrong = {5, 7};
  EXPECT_TRUE(ckpt->Expect("model.embed_tokens.weight", DType::kBF16, right).ok());

  Status shape = ckpt->Expect("model.embed_tokens.weight", DType::kBF16, wrong);
  EXPECT_EQ(shape.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(shape.message(), "tensor model.embed_tokens.weight has shape [7,5], expected [5,7]");

  Status dtype = ckpt->Expect("model.embed_tokens.weight", DType::kF32, right);
  EXPECT_EQ(dtype.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(dtype.message(), "tensor model.embed_tokens.weight has dtype BF16, expected F32");

  Status missing = ckpt->Expect("lm_head.weight", DType::kBF16, right);
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.message().find("lm_head.weight"), std::string::npos);

  // Any dtype accepted when the spec leaves it open.
  EXPECT_TRUE(ckpt->Expect(TensorSpec{"norm.weight", {5}, std::nullopt}).ok());
}

TEST(CheckpointExpect, CheckTensorsReportsEveryProblemAtOnce) {
  TempDir dir;
  const auto owned = SampleTensors(10);
  ASSERT_TRUE(WriteSafetensors(dir.path() / "model.safetensors", Views(owned)).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<TensorSpec> specs = {{"norm.weight", {5}, DType::kF32},
                                   {"A_log", {4}, std::nullopt},
                                   {"lm_head.weight", {7, 5}, std::nullopt}};
  Status st = ckpt->CheckTensors(specs);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("2 of 3 tensors"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tensor A_log has shape [3], expected [4]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lm_head.weight"), std::string::npos) << st.message();
  specs.pop_back();
  specs[1].shape = {3};
  EXPECT_TRUE(ckpt->CheckTensors(specs).ok());
}

TEST(CheckpointOpen, MissingPathAndEmptyFolderAreNotFound) {
  TempDir dir;
  auto none = Checkpoint::Open(dir.path() / "nothing");
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  auto empty = Checkpoint::Open(dir.path());
  EXPECT_EQ(empty.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(empty.status().message().find("model.safetensors.index.json"), std::string::npos);
}

}  // namespace
}  // namespace dflash::trainer
