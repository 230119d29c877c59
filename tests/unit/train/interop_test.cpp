// Interop: a checkpoint's model.safetensors loads into the equivalent PyTorch module's state_dict by name
// (strict), and that module computes what bellows computed. Runs Python's torch and safetensors from
// BELLOWS_PYTHON (scripts/setup.sh installs them; CTest passes the variable).
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/data/npy.h"
#include "bellows/models/mlp.h"
#include "bellows/train/checkpointing.h"
#include "test_paths.h"

namespace bellows::train {
namespace {

namespace fs = std::filesystem;

TEST(Interop, CheckpointWeightsLoadIntoThePyTorchModuleByName) {
  const char* python = std::getenv("BELLOWS_PYTHON");
  if (python == nullptr || *python == '\0') GTEST_SKIP() << "BELLOWS_PYTHON is not set (run through scripts/dev.sh test)";
  const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("bellows_interop_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const std::string norm : {"none", "layer"}) {
    torch::manual_seed(5);
    models::MlpOptions o;
    o.in_features = 8;
    o.hidden = {16, 12};
    o.out_features = 3;
    o.norm = norm;
    models::Mlp model(o);
    {
      torch::NoGradGuard no_grad;  // non-trivial LayerNorm affine parameters, so their names matter
      for (auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.1);
    }
    model->eval();
    const at::Tensor x = at::randn({5, 8});
    const at::Tensor y = model->forward(x).detach();

    ckpt::Checkpoint cp;
    cp.step = 1;
    cp.model = model_tensors(*model);
    const fs::path saved = ckpt::save_checkpoint(dir / norm, cp);
    data::write_npy(dir / "x.npy", x);
    data::write_npy(dir / "y.npy", y);
    std::ofstream(dir / "spec.json") << fmt::format(R"({{"in_features": 8, "hidden": [16, 12], "out_features": 3, "norm": "{}"}})", norm);
    const std::string command = fmt::format("'{}' '{}/golden/check_pytorch_mlp.py' '{}' '{}' '{}' '{}'", python, BELLOWS_TEST_DATA_DIR + "/..",
                                            (saved / "model.safetensors").string(), (dir / "spec.json").string(),
                                            (dir / "x.npy").string(), (dir / "y.npy").string());
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << command;
    EXPECT_EQ(WEXITSTATUS(status), 0) << command << " (norm " << norm << ")";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bellows::train
