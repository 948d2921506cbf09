// int8 calibration from a folder of .npy batches (calibration: {inputs: DIR}): the config checks of
// the folder, which subfolder each batch number reads, and the per-file errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "builder/build_config.h"
#include "builder/quantization/calibration.h"
#include "runtime/npy_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class CalibrationFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_calib_folder_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `n` batch subfolders (named so that name order differs from creation order), and a stray file
  // that is not a batch.
  void make_batches(int n) {
    for (int i = n - 1; i >= 0; --i) fs::create_directories(dir_ / ("b" + std::to_string(i)));
    std::ofstream(dir_ / "README.txt") << "not a batch\n";
  }
  std::string config(const std::string& calibration) const {
    return "model: m.onnx\nprofiles:\n  full:\n    dims: {t: 6}\nprecision: int8\ncalibration: {inputs: " + dir_.string() + calibration + "}\n";
  }
  void expect_error(const std::string& text, const std::vector<std::string>& parts) {
    auto r = parse_build_config(text, "cfg/test.yaml");
    ASSERT_FALSE(r.ok()) << "expected an error containing '" << parts.front() << "'";
    for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
  }

  fs::path dir_;
};

TEST_F(CalibrationFolder, BatchesDefaultToTheFoldersNotHeldOut) {
  make_batches(5);
  auto r = parse_build_config(config(", holdout: 2"), "cfg/test.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const CalibrationConfig& c = r->calibration;
  EXPECT_EQ(c.folder, dir_.string());
  ASSERT_EQ(c.batch_folders.size(), 5u);
  EXPECT_EQ(c.batches, 3);
  // Sorted by name; 1..3 calibrate, later batch numbers cycle through the last two.
  EXPECT_EQ(batch_folder(c, 1), (dir_ / "b0").string());
  EXPECT_EQ(batch_folder(c, 3), (dir_ / "b2").string());
  EXPECT_EQ(batch_folder(c, 4), (dir_ / "b3").string());
  EXPECT_EQ(batch_folder(c, 5), (dir_ / "b4").string());
  EXPECT_EQ(batch_folder(c, 6), (dir_ / "b3").string());
}

TEST_F(CalibrationFolder, BatchesPicksTheFirstFolders) {
  make_batches(5);
  auto r = parse_build_config(config(", holdout: 1, batches: 2"), "cfg/test.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->calibration.batches, 2);
  EXPECT_EQ(batch_folder(r->calibration, 2), (dir_ / "b1").string());
  EXPECT_EQ(batch_folder(r->calibration, 3), (dir_ / "b4").string());  // held out: the last
}

TEST_F(CalibrationFolder, ConfigErrorsNameTheKeyAndFolder) {
  make_batches(3);
  expect_error(config(", holdout: 3"), {"cfg/test.yaml:6", "'calibration.inputs'", "has 3 batch subfolders, needs at least 4",
                                        "last 3 are held out"});
  expect_error(config(", holdout: 1, batches: 3"), {"cfg/test.yaml:6", "'calibration.batches'", "3 exceeds the 2 calibrating subfolders",
                                                    dir_.string()});
  expect_error(config("/nope"), {"'calibration.inputs'", "/nope' is not a folder", "generators"});
  expect_error(config("/README.txt"), {"'calibration.inputs'", "is not a folder"});
}

TEST_F(CalibrationFolder, FilesMustMatchTheOptShapesAndDtypes) {
  make_batches(2);
  auto cfg = parse_build_config(config(", holdout: 1"), "cfg/test.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  Plan plan;
  for (const auto& [name, dtype] : {std::pair<const char*, DType>{"x:0", DType::kFloat32}, {"ids", DType::kInt64}}) {
    PlanValue v;
    v.name = name;
    v.dtype = dtype;
    plan.values.push_back(v);
  }
  plan.inputs = {0, 1};
  const std::map<std::string, Shape> opt = {{"x:0", Shape{2, 3}}, {"ids", Shape{2}}};
  auto expect_batch_error = [&](const std::vector<std::string>& parts) {
    auto r = batch_inputs(plan, opt, *cfg, 1);
    ASSERT_FALSE(r.ok()) << "expected an error containing '" << parts.front() << "'";
    for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
  };
  const fs::path b0 = dir_ / "b0";
  expect_batch_error({(b0 / "x_0.npy").string(), "is missing", "input 'x:0'"});  // engine-run's file name
  ASSERT_TRUE(write_npy((b0 / "x_0.npy").string(), Tensor::zeros(DType::kFloat32, Shape{2, 4}).view()).ok());
  ASSERT_TRUE(write_npy((b0 / "ids.npy").string(), Tensor::zeros(DType::kInt64, Shape{2}).view()).ok());
  expect_batch_error({(b0 / "x_0.npy").string(), "input 'x:0' dim 1 is 4, expected 3", "opt shapes"});
  ASSERT_TRUE(write_npy((b0 / "x_0.npy").string(), Tensor::zeros(DType::kFloat32, Shape{2, 3, 1}).view()).ok());
  expect_batch_error({"input 'x:0' has rank 3", "expected rank 2", "opt shapes"});
  ASSERT_TRUE(write_npy((b0 / "x_0.npy").string(), Tensor::zeros(DType::kFloat64, Shape{2, 3}).view()).ok());
  expect_batch_error({"input 'x:0' has dtype float64, expected float32"});
  ASSERT_TRUE(write_npy((b0 / "x_0.npy").string(), Tensor::zeros(DType::kFloat32, Shape{2, 3}).view()).ok());
  auto ok = batch_inputs(plan, opt, *cfg, 1);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].first, "x:0");
  // The cache key follows the calibrating files' contents, not the held-out ones'.
  std::ofstream(dir_ / "m.onnx") << "model bytes";
  cfg->model = (dir_ / "m.onnx").string();
  auto k1 = calibration_cache_key(plan, *cfg, "full", opt);
  ASSERT_TRUE(k1.ok()) << k1.status().message();
  EXPECT_NE(k1->find(" folder "), std::string::npos) << *k1;
  EXPECT_EQ(k1->find('\n'), std::string::npos) << *k1;
  ASSERT_TRUE(write_npy((dir_ / "b1" / "x_0.npy").string(), Tensor::zeros(DType::kFloat32, Shape{2, 3}).view()).ok());
  auto k2 = calibration_cache_key(plan, *cfg, "full", opt);
  ASSERT_TRUE(k2.ok()) << k2.status().message();
  EXPECT_EQ(*k1, *k2);
  Tensor changed = Tensor::zeros(DType::kFloat32, Shape{2, 3});
  changed.as<float>()[4] = 0.5f;
  ASSERT_TRUE(write_npy((b0 / "x_0.npy").string(), changed.view()).ok());
  auto k3 = calibration_cache_key(plan, *cfg, "full", opt);
  ASSERT_TRUE(k3.ok()) << k3.status().message();
  EXPECT_NE(*k1, *k3);
}

}  // namespace
}  // namespace kiln
