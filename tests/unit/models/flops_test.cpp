// Analytic forward FLOPs of the built-in layers (models/flops.h) against hand counts, and the models that state
// theirs (ModelEntry::forward_flops).
#include "bellows/models/flops.h"

#include <gtest/gtest.h>

#include "bellows/app/schema.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/models/registry.h"

namespace bellows::models {
namespace {

TEST(Flops, LayersMatchHandCounts) {
  EXPECT_DOUBLE_EQ(linear_flops(32, 64, 256), 32.0 * (2 * 64 * 256 + 256));
  EXPECT_DOUBLE_EQ(linear_flops(1, 64, 256, /*bias=*/false), 2.0 * 64 * 256);
  // 2 images, 3 -> 8 channels, 3x3 kernel, 5x5 output: 2*8*25 outputs of 2*3*9 FLOPs each.
  EXPECT_DOUBLE_EQ(conv2d_flops(2, 3, 8, 3, 3, 5, 5), 400.0 * 54);
  EXPECT_DOUBLE_EQ(conv2d_flops(2, 8, 8, 3, 3, 5, 5, /*groups=*/8, /*bias=*/true), 400.0 * (18 + 1));  // depthwise
  // One sequence of 4 tokens, d = 8: projections 4 x 4 rows x (2*8*8 + 8) = 2,176; scores and sum 2 x 2*16*8 = 512.
  EXPECT_DOUBLE_EQ(attention_flops(1, 4, 8), 2176.0 + 512.0);
  // LSTM, 3 steps, 2 inputs, hidden 4: per step (2*2*16 + 16) + (2*4*16 + 16) = 80 + 144.
  EXPECT_DOUBLE_EQ(recurrent_flops(3, 2, 4, 1, false, 4), 3.0 * 224);
  // Bidirectional, 2 layers: layer 2 reads 2*4 = 8 features: per step (2*8*16 + 16) + 144 = 416; 2 directions each.
  EXPECT_DOUBLE_EQ(recurrent_flops(3, 2, 4, 2, true, 4), 2.0 * 3 * 224 + 2.0 * 3 * 416);
  // GRU: 3 gates.
  EXPECT_DOUBLE_EQ(recurrent_flops(1, 2, 4, 1, false, 3), (2.0 * 2 * 12 + 12) + (2.0 * 4 * 12 + 12));
  EXPECT_DOUBLE_EQ(norm_flops(10), 50.0);
}

TEST(Flops, BuiltInModelsStateTheirForwardFlops) {
  const config::Config mlp = app::resolve_config_text("seed: 0\n", "<test>", {"model.name=mlp", "model.in_features=8", "model.hidden=[16]",
                                                                               "model.out_features=1", "data.source=stream"});
  const ModelContext none{nullptr, {}};
  EXPECT_DOUBLE_EQ(*find_model("mlp").forward_flops(mlp, none), (2.0 * 8 * 16 + 16) + (2.0 * 16 + 1));
  const config::Config ddpm = app::resolve_config_text("seed: 0\n", "<test>", {"model.name=ddpm", "data.source=stream"});
  // W5: context 7 -> 256; [256 + 32 + 256] -> 256; one block 256 -> 256; 256 -> 256.
  const double w5 = (2.0 * 7 * 256 + 256) + (2.0 * 544 * 256 + 256) + (2.0 * 256 * 256 + 256) + (2.0 * 256 * 256 + 256);
  EXPECT_DOUBLE_EQ(*find_model("ddpm").forward_flops(ddpm, none), w5);
  // The LSTM needs the sequence length from the data.
  const config::Config lstm = app::resolve_config_text("seed: 0\n", "<test>", {"model.name=lstm", "model.in_features=2", "model.hidden_size=4",
                                                                                "model.num_layers=1", "data.source=stream"});
  EXPECT_FALSE(find_model("lstm").forward_flops(lstm, none).has_value());
  auto sequences = std::make_shared<data::TensorDataset>(std::map<std::string, at::Tensor>{{"x", at::zeros({5, 3, 2})}, {"y", at::zeros({5, 1})}});
  EXPECT_DOUBLE_EQ(*find_model("lstm").forward_flops(lstm, ModelContext{sequences, {}}), 3.0 * 224 + (2.0 * 4 * 1 + 1));
  // Transformer, 4 steps of 2 features, d 8, ff 16, one layer, mean pooling, 1 output:
  //   input 4 x (2*2*8 + 8) = 160; attention 2,688; feed-forward 4 x (2*8*16 + 16) + 4 x (2*16*8 + 8) = 1,088 + 1,056;
  //   two layer norms 2 x 5 x 32 = 320 and the final one 160; head 2*8 + 1 = 17.
  const config::Config transformer = app::resolve_config_text(
      "seed: 0\n", "<test>", {"model.name=transformer", "model.in_features=2", "model.d_model=8", "model.heads=2", "model.layers=1",
                              "model.ff=16", "data.source=stream"});
  auto windows = std::make_shared<data::TensorDataset>(std::map<std::string, at::Tensor>{{"x", at::zeros({5, 4, 2})}, {"y", at::zeros({5, 1})}});
  EXPECT_DOUBLE_EQ(*find_model("transformer").forward_flops(transformer, ModelContext{windows, {}}), 160.0 + 2688 + 1088 + 1056 + 320 + 160 + 17);
}

}  // namespace
}  // namespace bellows::models
