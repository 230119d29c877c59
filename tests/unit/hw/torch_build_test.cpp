// LibTorch build facts: parsed from a recorded at::show_config() text, and read live from the running library.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <fstream>
#include <sstream>

#include "bellows/hw/torch_build.h"
#include "test_paths.h"

namespace bellows::hw {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TorchConfig, ParsesRecordedShowConfig) {
  const std::string text = read_text(BELLOWS_TEST_DATA_DIR + "/torch_2.13.0_show_config.txt");
  ASSERT_FALSE(text.empty());
  const TorchBuildInfo info = parse_torch_config(text);
  EXPECT_EQ(info.version, "2.13.0");
  EXPECT_EQ(info.compiler, "GCC 13.3");
  EXPECT_TRUE(info.cuda_compiled);
  EXPECT_EQ(info.cuda_version, "13.0");
  EXPECT_EQ(info.cudnn_version, "9.20.0");
  EXPECT_TRUE(info.nccl);
  EXPECT_TRUE(info.gloo);
  EXPECT_EQ(info.blas, "mkl");
  EXPECT_EQ(info.lapack, "mkl");
  EXPECT_EQ(info.cpu_capability_build, "AVX512");
  EXPECT_EQ(info.onednn, "Intel(R) MKL-DNN v3.12.0");
  EXPECT_EQ(info.openmp, "OpenMP 201511 (a.k.a. OpenMP 4.5)");
  EXPECT_EQ(info.cuda_arch_list, (std::vector<std::string>{"7.5", "8.0", "8.6", "9.0", "10.0", "12.0"}));
}

TEST(TorchConfig, ParsesCpuOnlyBuild) {
  const TorchBuildInfo info = parse_torch_config(
      "PyTorch built with:\n  - GCC 11.2\n  - CPU capability usage: AVX2\n"
      "  - Build settings: BLAS_INFO=open, TORCH_VERSION=2.9.0, USE_CUDA=0, USE_GLOO=ON, USE_NCCL=OFF, \n");
  EXPECT_FALSE(info.cuda_compiled);
  EXPECT_FALSE(info.nccl);
  EXPECT_TRUE(info.cuda_arch_list.empty());
  EXPECT_EQ(info.blas, "open");
  EXPECT_EQ(info.version, "2.9.0");
  EXPECT_EQ(info.cpu_capability_build, "AVX2");
}

TEST(TorchBuild, LiveProbe) {
  const TorchBuildInfo info = probe_torch_build();
  EXPECT_EQ(info.version, TORCH_VERSION);
  EXPECT_EQ(info.cxx11_abi, _GLIBCXX_USE_CXX11_ABI == 1);
  EXPECT_GE(info.intra_op_threads, 1);
  EXPECT_GE(info.inter_op_threads, 1);
  EXPECT_FALSE(info.cpu_capability_runtime.empty());
  EXPECT_FALSE(info.parallel_backend.empty());
}

}  // namespace
}  // namespace bellows::hw
