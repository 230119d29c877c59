// The recurrent sequence models "lstm" and "gru": shapes, float64 gradients against central differences
// (with and without padded lengths), the last-valid-step and mean pooling of padded sequences against each
// sequence run alone, width checks against windowed data, and learning to continue oscillations.
#include "bellows/models/rnn.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bellows/config/schema.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/data/window.h"
#include "bellows/util/error.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

using test_support::build_model;
using test_support::error_from;
using test_support::expect_gradients_match;
using test_support::OneThread;
using test_support::train_tail_loss;
using ::testing::HasSubstr;
using Sizes = std::vector<std::int64_t>;

RnnOptions tiny_rnn(const std::string& cell, bool bidirectional, const std::string& pooling) {
  RnnOptions o;
  o.cell = cell;
  o.in_features = 3;
  o.hidden_size = 4;
  o.num_layers = 2;
  o.bidirectional = bidirectional;
  o.pooling = pooling;
  o.out_features = 2;
  return o;
}

TEST(RnnModel, OutputShapes) {
  for (const std::string cell : {"lstm", "gru"}) {
    for (const bool bidirectional : {false, true}) {
      for (const std::string pooling : {"last", "mean"}) {
        RnnModel model(tiny_rnn(cell, bidirectional, pooling));
        const at::Tensor x = at::randn({5, 7, 3});
        EXPECT_EQ(model->forward(x).sizes(), (Sizes{5, 2}));
        EXPECT_EQ(model->forward(x, at::tensor(std::vector<std::int64_t>{7, 1, 3, 7, 6})).sizes(), (Sizes{5, 2}));
      }
    }
  }
  // PyTorch's parameter names (nn.LSTM inside a module attribute "rnn"), for weights shared with a peer script.
  std::vector<std::string> names;
  for (const auto& p : RnnModel(tiny_rnn("lstm", true, "last"))->named_parameters()) names.push_back(p.key());
  EXPECT_THAT(names, ::testing::IsSupersetOf(
                         {"rnn.weight_ih_l0", "rnn.weight_hh_l1", "rnn.bias_ih_l0_reverse", "head.weight"}));
  const Error e = error_from([] { RnnModel(tiny_rnn("lstm", false, "last"))->forward(at::randn({2, 4, 5})); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("[2, 4, 5]"));
}

TEST(RnnModel, GradientsMatchFiniteDifferencesFloat64) {
  const OneThread one_thread;
  torch::manual_seed(1);
  for (const std::string cell : {"lstm", "gru"}) {
    for (const bool bidirectional : {false, true}) {
      RnnModel model(tiny_rnn(cell, bidirectional, bidirectional ? "mean" : "last"));
      model->to(at::kDouble);
      const at::Tensor x = at::randn({3, 5, 3}, at::kDouble).requires_grad_(true);
      const at::Tensor w = at::randn({3, 2}, at::kDouble);
      for (const bool padded : {false, true}) {
        const at::Tensor lengths = padded ? at::tensor(std::vector<std::int64_t>{2, 5, 4}) : at::Tensor();
        auto f = [&] { return (model->forward(x, lengths) * w).sum(); };
        std::vector<at::Tensor> tensors{x};
        for (const auto& p : model->parameters()) tensors.push_back(p);
        SCOPED_TRACE(cell + (bidirectional ? " bidirectional" : "") + (padded ? " padded" : ""));
        expect_gradients_match(f, tensors, 3);
      }
    }
  }
}

// A padded batch gives each sequence what it gives that sequence alone, cut to its length: the last valid
// step (or the mean over valid steps) is pooled, and padded values never reach the recurrence.
TEST(RnnModel, PaddedBatchEqualsEachSequenceAlone) {
  torch::manual_seed(2);
  for (const std::string cell : {"lstm", "gru"}) {
    for (const bool bidirectional : {false, true}) {
      for (const std::string pooling : {"last", "mean"}) {
        RnnModel model(tiny_rnn(cell, bidirectional, pooling));
        model->eval();
        const std::vector<std::int64_t> n{6, 2, 4};
        const at::Tensor x = at::randn({3, 6, 3});
        const at::Tensor padded = at::where((at::arange(6).unsqueeze(0) >= at::tensor(n).unsqueeze(1)).unsqueeze(2),
                                            at::randn({3, 6, 3}) * 100, x);
        const at::Tensor batch = model->forward(padded, at::tensor(n));
        for (int b = 0; b < 3; ++b) {
          const at::Tensor alone = model->forward(x[b].narrow(0, 0, n[b]).unsqueeze(0));
          EXPECT_TRUE(at::allclose(batch[b], alone[0], 1e-5, 1e-6))
              << cell << (bidirectional ? " bidirectional " : " ") << pooling << " sequence " << b;
        }
      }
    }
  }
}

TEST(SequencePooling, LastAndMeanOverValidSteps) {
  const at::Tensor h = at::arange(2 * 4 * 1, at::kFloat).view({2, 4, 1});  // sequence 0: 0..3, sequence 1: 4..7
  const at::Tensor n = at::tensor(std::vector<std::int64_t>{2, 4});
  EXPECT_TRUE(at::equal(pool_steps(h, n, "last"), at::tensor({1.0f, 7.0f}).view({2, 1})));
  EXPECT_TRUE(at::equal(pool_steps(h, n, "mean"), at::tensor({0.5f, 5.5f}).view({2, 1})));
  EXPECT_TRUE(at::equal(pool_steps(h, {}, "last"), at::tensor({3.0f, 7.0f}).view({2, 1})));
  EXPECT_TRUE(at::equal(pool_steps(h, {}, "mean"), at::tensor({1.5f, 5.5f}).view({2, 1})));
  // A length of 0 counts as 1 (no division by zero).
  EXPECT_TRUE(at::equal(pool_steps(h, at::tensor(std::vector<std::int64_t>{0, 4}), "mean"),
                        at::tensor({0.0f, 5.5f}).view({2, 1})));
}

TEST(RnnModel, BuildChecksWidthsAgainstWindowedData) {
  // Windows of 6 steps x 4 features; targets: horizon 3 x columns {1, 3} -> y [3, 2], 6 values.
  auto windows = data::make_window_dataset({{"x", at::randn({40, 4})}}, data::WindowOptions{6, 1, 3, {1, 3}}, "series");
  for (const std::string cell : {"lstm", "gru"}) {
    const std::string base = "model: {name: " + cell + ", hidden_size: 8, ";
    const Error out = error_from([&] { build_model(base + "in_features: 4, out_features: 2}\n", windows); });
    EXPECT_EQ(out.kind(), ErrorKind::kConfig);
    EXPECT_THAT(out.message(), HasSubstr("model.out_features is 2 (test.yaml"));
    EXPECT_THAT(out.message(), HasSubstr("y has shape [3, 2] = 6 values"));
    EXPECT_THAT(out.hint(), HasSubstr("model.out_features: 6"));
    const Error in = error_from([&] { build_model(base + "in_features: 3, out_features: 6}\n", windows); });
    EXPECT_EQ(in.kind(), ErrorKind::kConfig);
    EXPECT_THAT(in.message(), HasSubstr("model.in_features is 3"));
    const Error cls =
        error_from([&] { build_model(base + "in_features: 4, out_features: 6, task: classification}\n", windows); });
    EXPECT_THAT(cls.message(), HasSubstr("not one class index"));
    BuiltModel ok = build_model(base + "in_features: 4, out_features: 6}\n", windows);
    data::FetchContext fetch;
    const std::vector<std::int64_t> idx{0, 5, 9};
    EXPECT_TRUE(std::isfinite(ok.task->step(*ok.module, windows->get_batch(idx, fetch)).loss.item<float>()));
  }
  // Rows instead of windows: not a sequence.
  auto rows = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({40, 4})}, {"y", at::randn({40, 1})}});
  const Error e = error_from([&] { build_model("model: {name: lstm, in_features: 4, out_features: 1}\n", rows); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("needs sequences [T, F]"));
  EXPECT_THAT(e.hint(), HasSubstr("data.window.length"));
}

// Sine waves of random frequency (0.1 to 0.5 rad/step) and phase, 2 features (sin, cos) plus noise 0.01;
// from 16 steps, predict the next 2 steps of both (y [B, 2, 2] against 4 outputs): the model must infer the
// frequency. Predicting 0 scores 0.5; the mean loss over the last 20 of 150 Adam steps (batch 32, lr 1e-2,
// hidden 16) must be below 0.01.
TEST(RnnModel, LstmAndGruLearnToContinueOscillationsBelow0p01In150Steps) {
  const OneThread one_thread;
  for (const std::string cell : {"lstm", "gru"}) {
    torch::manual_seed(17);
    BuiltModel built =
        build_model("model: {name: " + cell + ", in_features: 2, hidden_size: 16, num_layers: 1, out_features: 4}\n");
    torch::optim::Adam optimizer(built.module->parameters(), torch::optim::AdamOptions(1e-2));
    const std::int64_t batch = 32, steps = 16;
    auto make_batch = [&] {
      const at::Tensor omega = at::rand({batch, 1}) * 0.4 + 0.1;
      const at::Tensor phase = at::rand({batch, 1}) * 2 * M_PI;
      const at::Tensor angle = omega * at::arange(steps + 2, at::kFloat).unsqueeze(0) + phase;  // [B, T + 2]
      const at::Tensor series = at::stack({angle.sin(), angle.cos()}, 2) + at::randn({batch, steps + 2, 2}) * 0.01;
      data::Batch b;
      b.size = batch;
      b.tensors = {{"x", series.narrow(1, 0, steps)}, {"y", series.narrow(1, steps, 2)}};
      return b;
    };
    const double tail = train_tail_loss(built, optimizer, make_batch, 150, 20);
    RecordProperty("tail_loss_" + cell, std::to_string(tail));
    EXPECT_LT(tail, 0.01) << cell;
  }
}

}  // namespace
}  // namespace bellows::models
