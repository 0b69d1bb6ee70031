// Trainer (trainer/train/trainer.h) end to end on the CPU with a small Qwen3.5-architecture target:
//   - loss falls on data with a learnable rule;
//   - a run resumed from its step-2 checkpoint ends bit-identical to the uninterrupted run (weights and losses);
//   - a crash during a checkpoint write (a stale .partial folder) does not affect resuming; a damaged checkpoint is
//     refused with a message naming the file;
//   - resuming with different math-changing options is refused; a fresh run into a used folder is refused.
#include "trainer/train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "setup/model_config.h"
#include "trainer/nn/tensor_io.h"
#include "trainer/train/train_checkpoint.h"
#include "train_test_util.h"

namespace dflash::trainer {
namespace {
namespace fs = std::filesystem;

class TrainLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dflash-train-loop-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    testing::WriteSmallTrainingSetup(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  TrainOptions Options(const std::string& run) const { return testing::SmallRunOptions(root_, run); }

  std::unique_ptr<Trainer> Make(const TrainOptions& o) {
    auto t = Trainer::Create(o, log_);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  static std::vector<double> Losses(const fs::path& metrics) {
    std::vector<double> out;
    std::ifstream f(metrics);
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line).at("loss"));
    return out;
  }

  fs::path root_;
  std::ostringstream log_;  // outlives the trainers (they keep writing to it)
};

TEST_F(TrainLoop, LossFallsOnLearnableData) {
  auto o = Options("run");
  o.max_steps = 40;
  o.lr = 1e-2;
  auto t = Make(o);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  const auto losses = Losses(o.output_dir / "metrics.jsonl");
  ASSERT_EQ(losses.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[i] / 5, last += losses[35 + i] / 5;
  std::string all;
  for (double l : losses) all += std::to_string(l) + " ";
  EXPECT_LT(last, 0.7 * first) << "first " << first << " last " << last << "; losses: " << all;
  EXPECT_GT(t->last_metrics().accuracy, 0.0);
}

TEST_F(TrainLoop, EveryStepReportsItsPhasesAndTheProfileModeWritesATrace) {
  auto o = Options("run");
  o.max_steps = 4;
  o.profile_steps = 2;
  auto t = Make(o);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  std::ifstream f(o.output_dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(f, line); ++lines) {
    const auto m = nlohmann::json::parse(line);
    ASSERT_TRUE(m.contains("phases_ms")) << line;
    const auto& p = m["phases_ms"];
    double sum = 0;
    for (const char* name : {"target_forward", "drafter_forward", "loss", "backward", "grad_sync", "optimizer",
                             "host"}) {
      ASSERT_TRUE(p.contains(name)) << name << " in " << line;
      EXPECT_GE(p[name].get<double>(), 0.0) << name;
      sum += p[name].get<double>();
    }
    // The phases and the host rest make up the step (host clocks on the CPU).
    EXPECT_NEAR(sum, 1e3 * m["step_time_s"].get<double>(), 1e-3 + 0.01 * sum) << line;
    EXPECT_GT(p["target_forward"].get<double>(), 0.0);
    EXPECT_GT(p["backward"].get<double>(), 0.0);
  }
  EXPECT_EQ(lines, 4);
  // Steps 2 and 3 (after the process's first) traced into one Chrome trace.
  const fs::path trace = o.output_dir / "profile-steps-2-3.json";
  ASSERT_TRUE(fs::exists(trace)) << log_.str();
  std::ifstream in(trace);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "the trace is not JSON";
  ASSERT_TRUE(j.contains("traceEvents"));
  bool saw_mm = false;
  for (const auto& e : j["traceEvents"]) saw_mm |= e.value("name", "").find("aten::mm") != std::string::npos;
  EXPECT_TRUE(saw_mm) << "the trace holds no matrix product";
  EXPECT_NE(log_.str().find("profile: steps 2-3 traced into"), std::string::npos) << log_.str();
}

TEST_F(TrainLoop, ResumedRunIsBitIdenticalToTheUninterruptedOne) {
  auto o = Options("straight");
  o.max_steps = 4;
  o.save_every = 2;
  auto straight = Make(o);
  ASSERT_TRUE(straight);
  ASSERT_TRUE(straight->Run().ok());

  // "Crash" after the step-2 checkpoint: a copy of the run folder as it was then, plus a half-written checkpoint.
  const fs::path crashed = root_ / "crashed";
  fs::create_directories(crashed / "checkpoints");
  fs::copy(o.output_dir / "checkpoints" / "step-00000002", crashed / "checkpoints" / "step-00000002",
           fs::copy_options::recursive);
  std::ofstream(crashed / "checkpoints" / "latest") << "step-00000002\n";
  fs::create_directories(crashed / "checkpoints" / "step-00000003.partial");
  std::ofstream(crashed / "checkpoints" / "step-00000003.partial" / "master.safetensors") << "garbage";
  {
    std::ifstream in(o.output_dir / "metrics.jsonl");
    std::ofstream out(crashed / "metrics.jsonl");
    std::string line;
    for (int i = 0; i < 2 && std::getline(in, line); ++i) out << line << "\n";
  }
  auto r = Options("crashed");
  r.max_steps = 4;
  r.save_every = 2;
  r.resume = true;
  auto resumed = Make(r);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->step(), 2);
  ASSERT_TRUE(resumed->Run().ok());
  EXPECT_FALSE(fs::exists(crashed / "checkpoints" / "step-00000003.partial")) << "stale partial left behind";

  const auto a = straight->drafter().named_parameters(), b = resumed->drafter().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  EXPECT_EQ(Losses(o.output_dir / "metrics.jsonl"), Losses(crashed / "metrics.jsonl"));
}

TEST_F(TrainLoop, RefusesDamagedCheckpointsChangedOptionsAndUsedFolders) {
  auto o = Options("run");
  o.max_steps = 2;
  auto t = Make(o);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  std::ostringstream log;
  EXPECT_FALSE(Trainer::Create(o, log).ok()) << "a fresh run into a folder holding a run must be refused";

  auto changed = o;
  changed.resume = true;
  changed.num_anchors = 5;
  auto refused = Trainer::Create(changed, log);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("num_anchors"), std::string::npos) << refused.status().ToString();

  auto latest = LatestCheckpoint(o.output_dir);
  ASSERT_TRUE(latest.ok());
  fs::resize_file(*latest / "master.safetensors", fs::file_size(*latest / "master.safetensors") / 2);
  auto resume = o;
  resume.resume = true;
  auto damaged = Trainer::Create(resume, log);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("master.safetensors"), std::string::npos) << damaged.status().ToString();
}

TEST_F(TrainLoop, BadInputIsOneReadableError) {
  std::ostringstream log;
  auto o = Options("run");
  o.data = root_ / "missing.jsonl";
  auto r = Trainer::Create(o, log);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.jsonl"), std::string::npos) << r.status().ToString();
  o = Options("run");
  o.device = "tpu";
  EXPECT_EQ(Trainer::Create(o, log).status().code(), ErrorCode::kInvalidArgument);
  o = Options("run");
  o.drafter_config.clear();
  EXPECT_EQ(Trainer::Create(o, log).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::trainer
