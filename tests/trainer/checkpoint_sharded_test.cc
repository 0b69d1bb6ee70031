// Sharded checkpoints (model.safetensors.index.json + shards) opened as one logical checkpoint, and their errors.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/trainer/checkpoint_test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/safetensors_writer.h"

namespace dflash::trainer {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using testing::WriteFile;

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;
};

// Writes tensors round-robin over `shards` files named like HF's and an index; returns the tensors.
std::vector<Tensor> WriteSharded(const std::filesystem::path& dir, int count, int shards, std::uint64_t seed) {
  std::vector<Tensor> all;
  for (int i = 0; i < count; ++i) {
    std::vector<std::int64_t> shape = {i + 1, 4};
    all.push_back({"model.language_model.layers." + std::to_string(i) + ".w", shape,
                   RandomBytes(*NumBytes(DType::kBF16, shape), seed + i)});
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  index["weight_map"] = nlohmann::json::object();
  for (int s = 0; s < shards; ++s) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<TensorToWrite> views;
    for (int i = s; i < count; i += shards) {
      views.push_back({all[i].name, DType::kBF16, all[i].shape, std::span(all[i].data)});
      index["weight_map"][all[i].name] = file;
    }
    EXPECT_TRUE(WriteSafetensors(dir / file, views).ok());
  }
  WriteFile(dir / "model.safetensors.index.json", index.dump(2));
  return all;
}

nlohmann::json ReadIndex(const std::filesystem::path& dir) {
  return nlohmann::json::parse(testing::ReadFile(dir / "model.safetensors.index.json"));
}

TEST(ShardedCheckpoint, OpensAsOneCheckpointAndReadsBackBitExact) {
  TempDir dir;
  const auto all = WriteSharded(dir.path(), 10, 3, 100);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->num_shards(), 3u);
  EXPECT_EQ(ckpt->Names().size(), all.size());
  for (const auto& t : all) {
    auto bytes = ckpt->Read(t.name);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, t.data) << t.name;
    EXPECT_TRUE(ckpt->Expect(t.name, DType::kBF16, t.shape).ok());
  }
  EXPECT_EQ(ckpt->FileOf(all[4].name)->filename(), "model-00002-of-00003.safetensors");
  // The index file itself may be given as the path.
  auto via_index = Checkpoint::Open(dir.path() / "model.safetensors.index.json");
  ASSERT_TRUE(via_index.ok()) << via_index.status().ToString();
  EXPECT_EQ(*via_index->Read(all[9].name), all[9].data);
}

TEST(ShardedCheckpoint, IndexTakesPrecedenceOverASingleFile) {
  TempDir dir;
  const auto all = WriteSharded(dir.path(), 4, 2, 200);
  const auto other = RandomBytes(4, 1);
  std::vector<TensorToWrite> single = {{"other", DType::kF32, {1}, std::span(other)}};
  ASSERT_TRUE(WriteSafetensors(dir.path() / "model.safetensors", single).ok());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(ckpt->Has(all[0].name));
  EXPECT_FALSE(ckpt->Has("other"));
}

TEST(ShardedCheckpoint, MissingShardIsNotFoundNamingTheShard) {
  TempDir dir;
  WriteSharded(dir.path(), 6, 3, 300);
  std::filesystem::remove(dir.path() / "model-00002-of-00003.safetensors");
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(ckpt.status().message().find("model-00002-of-00003.safetensors"), std::string::npos)
      << ckpt.status().message();
}

TEST(ShardedCheckpoint, IndexEntryAbsentFromItsShardIsCorruption) {
  TempDir dir;
  WriteSharded(dir.path(), 6, 3, 400);
  auto index = ReadIndex(dir.path());
  index["weight_map"]["model.language_model.ghost.weight"] = "model-00001-of-00003.safetensors";
  WriteFile(dir.path() / "model.safetensors.index.json", index.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(ckpt.status().message().find("model.language_model.ghost.weight"), std::string::npos)
      << ckpt.status().message();
  EXPECT_NE(ckpt.status().message().find("model-00001-of-00003.safetensors"), std::string::npos);
}

TEST(ShardedCheckpoint, TensorMissingFromIndexIsNotVisible) {
  TempDir dir;
  const auto all = WriteSharded(dir.path(), 6, 2, 500);
  auto index = ReadIndex(dir.path());
  index["weight_map"].erase(all[3].name);
  WriteFile(dir.path() / "model.safetensors.index.json", index.dump());
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_FALSE(ckpt->Has(all[3].name));
  Status st = ckpt->Expect(all[3].name, DType::kBF16, all[3].shape);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find(all[3].name), std::string::npos);
}

TEST(ShardedCheckpoint, MalformedIndexesAreRejected) {
  TempDir dir;
  WriteSharded(dir.path(), 4, 2, 600);
  const auto good = ReadIndex(dir.path());
  auto try_index = [&](const std::string& text) {
    WriteFile(dir.path() / "model.safetensors.index.json", text);
    return Checkpoint::Open(dir.path()).status();
  };
  EXPECT_EQ(try_index("{not json").code(), ErrorCode::kCorruption);
  EXPECT_EQ(try_index("{\"metadata\":{}}").code(), ErrorCode::kCorruption);
  EXPECT_EQ(try_index("{\"weight_map\":{}}").code(), ErrorCode::kCorruption);
  EXPECT_EQ(try_index("{\"weight_map\":{\"a\":3}}").code(), ErrorCode::kCorruption);
  Status escape = try_index("{\"weight_map\":{\"a\":\"../outside.safetensors\"}}");
  EXPECT_EQ(escape.code(), ErrorCode::kCorruption);
  EXPECT_NE(escape.message().find("../outside.safetensors"), std::string::npos);
  EXPECT_EQ(try_index("{\"weight_map\":{\"a\":\"/etc/passwd\"}}").code(), ErrorCode::kCorruption);
  EXPECT_TRUE(try_index(good.dump()).ok());
}

TEST(ShardedCheckpoint, CorruptShardFailsOpenNamingTheShard) {
  TempDir dir;
  WriteSharded(dir.path(), 4, 2, 700);
  const auto shard = dir.path() / "model-00002-of-00002.safetensors";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 1);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), ErrorCode::kCorruption);
  EXPECT_NE(ckpt.status().message().find("model-00002-of-00002.safetensors"), std::string::npos)
      << ckpt.status().message();
}

TEST(ShardedCheckpoint, ConcurrentReadsFromManyThreadsAreBitExact) {
  TempDir dir;
  const auto all = WriteSharded(dir.path(), 24, 4, 800);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const Checkpoint& shared = *ckpt;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const auto& want = all[(t * 7 + round) % all.size()];
        auto got = shared.Read(want.name);
        if (!got.ok() || *got != want.data) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace dflash::trainer
