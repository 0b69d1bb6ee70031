// The pipelined schedule (--pipeline on, trainer/train/feature_pipeline.h: the target's forward of the next row on a
// worker thread while the drafter trains on this one) against the serial one, end to end through the Trainer on the
// small hybrid target of train_test_util.h, on the CPU (two threads; TrainPipeline.*, in the cpu suite) or, built
// with DFLASH_PIPELINE_ON_GPU, on one GPU (the target on a stream of its own; TrainPipelineOnOneGpu.*, in the gpu
// suite, skipped without a GPU; LibTorch's own ops in bf16):
//   - the same weights bit for bit, the same losses and metrics, over steps of several rows (batch x accumulation)
//     and across an epoch boundary, where the next step's first row is read ahead;
//   - a checkpoint of a pipelined run holds the stream position of the step boundary (the serial run's), and a run
//     resumed from it ends bit-identical to the uninterrupted serial run;
//   - a failing target forward (a token id outside the vocabulary) ends the run with the serial run's error after
//     the same steps (CPU only: on a GPU that failure is a device-side assert, which ends the CUDA context).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainer/nn/tensor_io.h"
#include "trainer/train/train_checkpoint.h"
#include "trainer/train/trainer.h"
#include "train_test_util.h"

namespace dflash::trainer {
namespace {
namespace fs = std::filesystem;

#ifdef DFLASH_PIPELINE_ON_GPU
constexpr const char* kDevice = "cuda";
#else
constexpr const char* kDevice = "cpu";
#endif

class PipelineFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kDevice) != "cpu" && !torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
    root_ = fs::temp_directory_path() / ("dflash-train-pipeline-" + std::string(kDevice) + "-" +
                                         std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    testing::WriteSmallTrainingSetup(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  TrainOptions Options(const std::string& run, PipelineMode pipeline) const {
    TrainOptions o = testing::SmallRunOptions(root_, run);
    o.grad_accum = 2;
    o.max_steps = 7;  // 28 rows: the 24-sample epoch ends inside step 6
    o.device = kDevice;
    o.kernels = KernelBackend::kReference;
    o.pipeline = pipeline;
    return o;
  }

  // Runs to the end (or the first error); the error is returned, the trainer kept for its weights.
  Status Train(const TrainOptions& o, std::unique_ptr<Trainer>& t, std::ostringstream& log) {
    auto made = Trainer::Create(o, log);
    if (!made.ok()) return made.status();
    t = std::move(*made);
    return t->Run();
  }

  static std::vector<nlohmann::json> Metrics(const fs::path& run) {
    std::vector<nlohmann::json> out;
    std::ifstream f(run / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static void ExpectSameRun(const Trainer& a, const Trainer& b, const fs::path& run_a, const fs::path& run_b) {
    const auto wa = a.drafter().named_parameters(), wb = b.drafter().named_parameters();
    ASSERT_EQ(wa.size(), wb.size());
    for (std::size_t i = 0; i < wa.size(); ++i) {
      EXPECT_TRUE(torch::equal(wa[i].second.cpu(), wb[i].second.cpu())) << wa[i].first;
    }
    const auto ma = Metrics(run_a), mb = Metrics(run_b);
    ASSERT_EQ(ma.size(), mb.size());
    for (std::size_t s = 0; s < ma.size(); ++s) {
      for (const char* key : {"loss", "accuracy", "accept_length", "grad_norm", "tokens", "epoch", "lr"}) {
        EXPECT_EQ(ma[s][key], mb[s][key]) << key << " at step " << s + 1;
      }
    }
  }

  fs::path root_;
};

// The tests' names say where they ran.
#ifdef DFLASH_PIPELINE_ON_GPU
using TrainPipelineOnOneGpu = PipelineFixture;
#define PIPELINE_TEST(name) TEST_F(TrainPipelineOnOneGpu, name)
#else
using TrainPipeline = PipelineFixture;
#define PIPELINE_TEST(name) TEST_F(TrainPipeline, name)
#endif

PIPELINE_TEST(PipelinedRunTrainsWhatTheSerialRunTrains) {
  std::ostringstream serial_log, pipelined_log;
  std::unique_ptr<Trainer> serial, pipelined;
  const auto so = Options("serial", PipelineMode::kOff), po = Options("pipelined", PipelineMode::kOn);
  ASSERT_TRUE(Train(so, serial, serial_log).ok()) << serial_log.str();
  ASSERT_TRUE(Train(po, pipelined, pipelined_log).ok()) << pipelined_log.str();
  EXPECT_EQ(serial_log.str().find("pipeline:"), std::string::npos) << serial_log.str();
  EXPECT_NE(pipelined_log.str().find("pipeline: the target computes the next row's features"), std::string::npos)
      << pipelined_log.str();
  ExpectSameRun(*serial, *pipelined, so.output_dir, po.output_dir);
  const auto m = Metrics(po.output_dir);
  ASSERT_EQ(m.size(), 7u);
  EXPECT_EQ(m[5]["epoch"], 0);  // the sixth step ends the first epoch, the seventh is read from the second
  EXPECT_EQ(m[6]["epoch"], 1);
  for (const auto& step : m) EXPECT_GT(step["target_ms"].get<double>(), 0.0) << step.dump();
}

PIPELINE_TEST(ACheckpointOfAPipelinedRunResumesBitForBit) {
  auto so = Options("serial", PipelineMode::kOff), po = Options("pipelined", PipelineMode::kOn);
  so.save_every = po.save_every = 2;
  so.keep_checkpoints = po.keep_checkpoints = 10;
  std::ostringstream log;
  std::unique_ptr<Trainer> serial, pipelined, resumed;
  ASSERT_TRUE(Train(so, serial, log).ok()) << log.str();
  ASSERT_TRUE(Train(po, pipelined, log).ok()) << log.str();
  // At every checkpoint the pipelined run had read the next step's rows already; its state is the boundary's.
  for (const char* step : {"step-00000002", "step-00000004", "step-00000006"}) {
    std::ifstream a(so.output_dir / "checkpoints" / step / "state.json"),
        b(po.output_dir / "checkpoints" / step / "state.json");
    ASSERT_TRUE(a && b) << step;
    auto ja = nlohmann::json::parse(a), jb = nlohmann::json::parse(b);
    EXPECT_EQ(ja["batcher"], jb["batcher"]) << step;
    EXPECT_EQ(ja["progress"]["rows_done"], jb["progress"]["rows_done"]) << step;
  }
  // Resumed (pipelined) from step 4 of the pipelined run: the serial run's end, bit for bit.
  const fs::path crashed = root_ / "crashed";
  fs::create_directories(crashed / "checkpoints");
  fs::copy(po.output_dir / "checkpoints" / "step-00000004", crashed / "checkpoints" / "step-00000004",
           fs::copy_options::recursive);
  std::ofstream(crashed / "checkpoints" / "latest") << "step-00000004\n";
  auto ro = Options("crashed", PipelineMode::kOn);
  ro.save_every = 2;
  ro.resume = true;
  ASSERT_TRUE(Train(ro, resumed, log).ok()) << log.str();
  EXPECT_EQ(resumed->step(), 7);
  const auto ws = serial->drafter().named_parameters(), wr = resumed->drafter().named_parameters();
  ASSERT_EQ(ws.size(), wr.size());
  for (std::size_t i = 0; i < ws.size(); ++i) {
    EXPECT_TRUE(torch::equal(ws[i].second.cpu(), wr[i].second.cpu())) << ws[i].first;
  }
  const auto ms = Metrics(so.output_dir), mr = Metrics(crashed);
  ASSERT_EQ(mr.size(), 3u);
  for (std::size_t s = 0; s < 3; ++s) EXPECT_EQ(ms[4 + s]["loss"], mr[s]["loss"]) << "step " << 5 + s;
}

PIPELINE_TEST(AFailingTargetForwardEndsTheRunWithTheSerialError) {
  if (std::string(kDevice) != "cpu") {
    GTEST_SKIP() << "on a GPU the injected failure (an index out of range) is a device-side assert, which ends the "
                    "process's CUDA context; the error path does not depend on the device and runs on the CPU";
  }
  // Sample 9 holds a token id past the target's vocabulary: its embedding lookup fails in the target's forward.
  std::vector<std::string> lines;
  {
    std::ifstream in(root_ / "data.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  auto bad = nlohmann::json::parse(lines[9]);
  bad["input_ids"][20] = 10 * testing::kVocab;
  lines[9] = bad.dump();
  {
    std::ofstream out(root_ / "data.jsonl");
    for (const auto& line : lines) out << line << "\n";
  }
  std::ostringstream log;
  std::unique_ptr<Trainer> serial, pipelined;
  const auto so = Options("serial", PipelineMode::kOff), po = Options("pipelined", PipelineMode::kOn);
  const Status serial_error = Train(so, serial, log), pipelined_error = Train(po, pipelined, log);
  ASSERT_FALSE(serial_error.ok());
  EXPECT_EQ(serial_error.ToString(), pipelined_error.ToString());
  const auto ms = Metrics(so.output_dir), mp = Metrics(po.output_dir);
  EXPECT_LT(ms.size(), 7u) << "the bad row was never reached";
  EXPECT_EQ(ms.size(), mp.size()) << "the runs ended after different steps";
  std::cout << "the run ended after " << ms.size() << " steps: " << serial_error.ToString() << "\n";
}

}  // namespace
}  // namespace dflash::trainer
