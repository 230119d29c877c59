// End-to-end `bellows predict`: a tiny DDPM (and a regression MLP) trained with `bellows train` on a generated
// NPZ, then predictions from the run directory, the checkpoints directory or one checkpoint: shapes, seeds,
// batch-size independence, EMA vs raw weights, and the error paths with their exit codes.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "bellows/data/npy.h"
#include "run_cli.h"

namespace bellows::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// context [256, 3] ~ U(-1, 1); fine [256, 16] = a smooth function of the context + 0.05 noise.
fs::path write_data(const fs::path& dir) {
  at::manual_seed(0);
  const at::Tensor context = at::rand({256, 3}) * 2 - 1;
  const at::Tensor grid = at::linspace(0, 1, 16).unsqueeze(0);
  const at::Tensor fine = context.slice(1, 0, 1) + context.slice(1, 1, 2) * grid +
                          0.5 * at::sin(6 * grid + 3 * context.slice(1, 2, 3)) + 0.05 * at::randn({256, 16});
  data::write_npz(dir / "train.npz", {{"context", context}, {"fine", fine}});
  data::write_npz(dir / "heldout.npz", {{"context", context.slice(0, 0, 10)}, {"wide", at::rand({10, 5})}});
  return dir / "train.npz";
}

// Trains `model_yaml` for 40 steps on the generated data; returns the run directory.
fs::path train(const fs::path& dir, const std::string& name, const std::string& model_yaml, bool ema) {
  const fs::path data = dir / "train.npz";
  if (!fs::exists(data)) write_data(dir);
  std::ofstream(dir / (name + ".yaml")) << "name: " << name << "\nseed: 0\nthreads: 1\n"
                                        << "data: {source: npy, path: '" << data.string()
                                        << "', batch_size: 64, npy: {x: context, y: fine}}\n"
                                        << "model: " << model_yaml << "\n"
                                        << "train: {epochs: 100, max_steps: 40, log_every_n_steps: 20}\n"
                                        << "optim: {lr: 0.003}\n"
                                        << "ema: {enabled: " << (ema ? "true" : "false") << ", decay: 0.9}\n"
                                        << "checkpoint: {every_n_steps: 20}\n";
  const CliResult r =
      run_cli("train '" + (dir / (name + ".yaml")).string() + "' output_dir='" + (dir / "runs").string() + "'");
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  return dir / "runs" / name;
}

const char* const kTinyDdpm =
    "{name: ddpm, context_features: 3, out_features: 16, hidden: 32, time_embedding: 8, steps: 10}";

CliResult predict(const fs::path& path, const std::string& args) {
  return run_cli("predict '" + path.string() + "' --threads 1 " + args);
}

TEST(PredictCli, DdpmSamplesWithShapesSeedsAndWeights) {
  const fs::path dir = scratch_dir("predict_ddpm");
  const fs::path run = train(dir, "tiny", kTinyDdpm, /*ema=*/true);
  const std::string input = "--input '" + (dir / "heldout.npz").string() + ":context' ";
  auto out = [&](const std::string& name) { return "--output '" + (dir / name).string() + "' "; };

  // One sample per row: [rows, out]; the run directory resolves to its newest checkpoint (step 40).
  CliResult r = predict(run, input + out("one.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("EMA weights of step-000000040"));
  const at::Tensor one = data::read_npy(dir / "one.npy");
  EXPECT_EQ(one.sizes(), (std::vector<std::int64_t>{10, 16}));
  EXPECT_EQ(one.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::isfinite(one).all().item<bool>());

  // N samples per row: [rows, N, out]; the same seed gives the same samples whatever the batch size.
  r = predict(run / "checkpoints", input + out("three.npy") + "--samples 3 --seed 5 --batch-size 4");
  ASSERT_EQ(r.code, 0) << r.err;
  const at::Tensor three = data::read_npy(dir / "three.npy");
  EXPECT_EQ(three.sizes(), (std::vector<std::int64_t>{10, 3, 16}));
  r = predict(run, input + out("three_again.npy") + "--samples 3 --seed 5 --batch-size 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(at::allclose(data::read_npy(dir / "three_again.npy"), three, 1e-5, 1e-5));
  r = predict(run, input + out("three_other.npy") + "--samples 3 --seed 6");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(at::allclose(data::read_npy(dir / "three_other.npy"), three, 1e-3, 1e-3));

  // EMA weights by default (as with --ema); --raw uses the trained weights; one step-XXXX directory works too.
  r = predict(run, input + out("ema.npy") + "--ema");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(data::read_npy(dir / "ema.npy").equal(one));
  r = predict(run / "checkpoints" / "step-000000040", input + out("raw.npy") + "--raw");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("raw weights"));
  EXPECT_FALSE(at::allclose(data::read_npy(dir / "raw.npy"), one, 1e-3, 1e-3));

  // DDIM over 4 steps.
  r = predict(run, input + out("ddim.npy") + "--steps 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(data::read_npy(dir / "ddim.npy").sizes(), (std::vector<std::int64_t>{10, 16}));
  // No temporary files left beside the outputs.
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(PredictCli, ErrorsExitWithTheirCodes) {
  const fs::path dir = scratch_dir("predict_errors");
  const fs::path run = train(dir, "tiny", kTinyDdpm, /*ema=*/true);
  const std::string out = "--output '" + (dir / "out.npy").string() + "'";
  const std::string npz = (dir / "heldout.npz").string();

  // A missing array: input data error (3), naming the arrays there are.
  CliResult r = predict(run, "--input '" + npz + ":contxt' " + out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("contxt"));
  EXPECT_THAT(r.err, HasSubstr("context"));
  // Rows of the wrong width: 3.
  r = predict(run, "--input '" + npz + ":wide' " + out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("has shape [10, 5], the model expects [rows, 3] (model.context_features"));
  // An .npz with several arrays and none named x: say which to name.
  r = predict(run, "--input '" + npz + "' " + out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("none is named x"));
  // Usage errors: 2.
  r = predict(run, "--input '" + npz + ":context' " + out + " --ema --raw");
  EXPECT_EQ(r.code, 2) << r.err;
  r = predict(run, "--input '" + npz + ":context' " + out + " --samples 0");
  EXPECT_EQ(r.code, 2) << r.err;
  r = predict(run, "--input '" + npz + ":context' " + out + " --steps 11");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("outside [0, 10]"));
  // A checkpoint that does not verify: 3, and nothing written.
  const fs::path broken = dir / "broken";
  fs::copy(run / "checkpoints" / "step-000000040", broken, fs::copy_options::recursive);
  fs::resize_file(broken / "model.safetensors", fs::file_size(broken / "model.safetensors") - 8);
  r = predict(broken, "--input '" + npz + ":context' " + out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model.safetensors"));
  r = predict(dir / "nowhere", "--input '" + npz + ":context' " + out);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
}

TEST(PredictCli, RegressionMlpPredictsItsOutputs) {
  const fs::path dir = scratch_dir("predict_mlp");
  const fs::path run = train(dir, "mlp", "{name: mlp, in_features: 3, hidden: [32], out_features: 16}", /*ema=*/false);
  const std::string in =
      "--input '" + (dir / "heldout.npz").string() + ":context' --output '" + (dir / "mlp.npy").string() + "'";
  CliResult r = predict(run, in);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("raw weights"));  // no EMA in this run
  const at::Tensor y = data::read_npy(dir / "mlp.npy");
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{10, 16}));
  EXPECT_GT(y.std().item<double>(), 0.01);  // inputs differ, so do outputs
  // The same again: deterministic.
  r = predict(run, in);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(data::read_npy(dir / "mlp.npy").equal(y));
  // Samples are for generative models (2); --ema needs EMA weights (3).
  EXPECT_EQ(predict(run, in + " --samples 2").code, 2);
  r = predict(run, in + " --ema");
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("has no EMA weights"));
}

}  // namespace
}  // namespace bellows::testing
