// Analytic forward FLOPs of the built-in layers (models/flops.h) against hand counts, and the models that state
// theirs (ModelEntry::forward_flops).
#include "bellows/models/flops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "bellows/app/schema.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/models/gnn.h"
#include "bellows/models/registry.h"
#include "bellows/models/resnet.h"
#include "bellows/models/text_pair.h"
#include "bellows/obs/profile.h"

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

// The FLOPs LibTorch's profiler counts from the op shapes of one forward pass (no gradients).
template <class F>
double counted_forward_flops(F&& forward) {
  torch::NoGradGuard no_grad;
  obs::FlopCounter counter;
  EXPECT_TRUE(counter.start());
  forward();
  return counter.stop();
}

// ResNet-18, small stem, 3 x 8 x 8 images, width 0.125 (8 channels), 10 classes, by hand:
//   stem: conv 2*8*64*27 = 27,648, bn 5*8*64 = 2,560;
//   layer1 (8 ch, 8x8): 2 blocks of 2 convs 2*8*64*72 = 73,728 and 2 bns 2,560: 305,152;
//   layer2 (16 ch, 4x4): block 0 conv1 36,864 + conv2 73,728 + downsample 4,096 + 3 bns 1,280 = 118,528,
//     block 1 2*73,728 + 2*1,280 = 150,016;
//   layer3 (32 ch, 2x2): 36,864 + 73,728 + 4,096 + 3*640 = 116,608 and 2*73,728 + 2*640 = 148,736;
//   layer4 (64 ch, 1x1): 36,864 + 73,728 + 4,096 + 3*320 = 115,648 and 2*73,728 + 2*320 = 148,096;
//   head 2*64*10 + 10 = 1,290.
TEST(Flops, ResNetMatchesTheHandCountAndTheCountedConvolutions) {
  ResNetOptions o;
  o.width = 0.125;
  o.stem = "small";
  o.num_classes = 10;
  const double by_hand = 27648.0 + 2560 + 305152 + 118528 + 150016 + 116608 + 148736 + 115648 + 148096 + 1290;
  EXPECT_DOUBLE_EQ(resnet_forward_flops(o, 8, 8), by_hand);
  // The imagenet stem: 7x7 stride 2 (32 -> 16), max pool (16 -> 8): the stages then see 8x8 as above.
  ResNetOptions big = o;
  big.stem = "imagenet";
  EXPECT_DOUBLE_EQ(resnet_forward_flops(big, 32, 32), by_hand - 27648 - 2560 + 2.0 * 8 * 256 * 3 * 49 + 5.0 * 8 * 256);
  // Against LibTorch's count of the real model's forward (measured, LibTorch 2.13): the convolutions are the
  // same numbers; the counter leaves out BatchNorm, the head's bias (it counts addmm as its product) and the
  // in-place residual additions (add_).
  ResNetImpl net(o);
  net.eval();
  const double counted = counted_forward_flops([&] { net.forward(at::randn({2, 3, 8, 8})); }) / 2;
  const double bns = 2560.0 * 5 + 1280 * 5 + 640 * 5 + 320 * 5;  // the 17 BatchNorms: 24,000
  EXPECT_DOUBLE_EQ(counted, by_hand - bns - 10);
  // The registry states it from the data's image size.
  const config::Config c = app::resolve_config_text("seed: 0\n", "<test>", {"model.name=resnet", "model.width=0.125", "model.stem=small",
                                                                              "model.out_features=10", "data.source=stream"});
  auto images = std::make_shared<data::TensorDataset>(std::map<std::string, at::Tensor>{{"x", at::zeros({4, 3, 8, 8})}, {"y", at::zeros({4}, at::kLong)}});
  EXPECT_DOUBLE_EQ(*find_model("resnet").forward_flops(c, ModelContext{images, {}}), by_hand);
  EXPECT_FALSE(find_model("resnet").forward_flops(c, ModelContext{nullptr, {}}).has_value());
}

// Text pairs: the encoder at model.max_len tokens and the head; 4 tokens, d 8, ff 16, one layer: 5,312 (the
// transformer's count above without its input projection and head) + 2*8*3 + 3.
TEST(Flops, TextPairCountsTheEncoderAtTheLongestPair) {
  const config::Config c = app::resolve_config_text(
      "seed: 0\n", "<test>", {"model.name=text_pair", "model.d_model=8", "model.heads=2", "model.layers=1", "model.ff=16", "model.max_len=4",
                              "model.vocab_size=50", "model.out_features=3", "data.source=stream"});
  const ModelEntry& entry = find_model("text_pair");
  EXPECT_DOUBLE_EQ(*entry.forward_flops(c, ModelContext{nullptr, {}}), 2688.0 + 1088 + 1056 + 320 + 160 + 51);
  EXPECT_FALSE(entry.forward_flops_basis.empty());
  // Against the counter on a batch of full-length pairs (measured, LibTorch 2.13): it leaves out the layer norms
  // (480) and the Linear biases (4 x 32 + 96 + 3 = 227), and adds the elementwise additions (token + segment
  // embedding, positions, two residuals: 4 x 32 = 128). The CPU attention kernel's products (512) it counts as the
  // formula does (bellows' count of the fused kernel, obs/profile.h).
  TextPairOptions o;
  o.vocab_size = 50;
  o.num_classes = 3;
  o.encoder.d_model = 8;
  o.encoder.heads = 2;
  o.encoder.layers = 1;
  o.encoder.ff = 16;
  o.encoder.max_len = 4;
  TextPairClassifierImpl net(o);
  net.eval();
  const double counted = counted_forward_flops([&] { net.forward(at::randint(1, 50, {2, 4}, at::kLong), at::Tensor(), at::Tensor()); }) / 2;
  const double analytic = *entry.forward_flops(c, ModelContext{nullptr, {}});
  EXPECT_DOUBLE_EQ(counted, analytic - 480 - 227 + 128);
}

// The graph network: per sample, the per-sample Linear layers in full and the once-per-batch embeddings divided
// by the batch; against LibTorch's count of the model's forward (no LayerNorm, which the counter leaves out).
TEST(Flops, GnnMatchesTheCountedForward) {
  GnnOptions o;
  o.in_channels = 3;
  o.out_channels = 2;
  o.latent_size = 16;
  o.num_gnn_layers = 2;
  o.mlp_layers = 1;
  o.layer_norm = false;
  o.residual_channels = {};
  for (int i = 0; i < 9; ++i) o.lat.push_back(40 + 0.5 * i);
  for (int i = 0; i < 9; ++i) o.lon.push_back(5 + 0.5 * i);
  o.mesh.stride = 4;
  const RegionalGraph g = build_regional_graph(o.lat, o.lon, o.mesh);
  GnnImpl net(o);
  net.eval();
  for (const std::int64_t batch : {1, 4}) {
    const double counted = counted_forward_flops([&] { net.forward(at::randn({batch, 3, 9, 9})); }) / static_cast<double>(batch);
    const double analytic = gnn_forward_flops(o, g, batch);
    // The counter leaves out the Linear biases (it counts addmm as its product) and adds the elementwise additions
    // (the three terms of each edge's first layer, the residual connections): about 1% apart at latent 16
    // (measured: 1.2797e6 vs 1.2938e6 at batch 1, 874,248 vs 882,690 at batch 4).
    EXPECT_NEAR(counted, analytic, 0.02 * analytic) << "batch " << batch << ": counted " << counted << ", analytic " << analytic;
  }
  // The once-per-batch share shrinks as the batch grows.
  EXPECT_GT(gnn_forward_flops(o, g, 1), gnn_forward_flops(o, g, 8));
  // A hand count of the smallest case: no hidden layers, no processor, 1 -> 1 channel, latent 2, on this graph.
  GnnOptions tiny = o;
  tiny.in_channels = tiny.out_channels = 1;
  tiny.latent_size = 2;
  tiny.num_gnn_layers = 0;
  tiny.mlp_layers = 0;
  const double n = 81, m = 9, e1 = static_cast<double>(g.grid_to_mesh.size()), e3 = static_cast<double>(g.mesh_to_grid.size());
  const double lin_4_2 = 2 * 4 * 2 + 2, lin_2_2_nobias = 2 * 2 * 2, lin_2_2 = 2 * 2 * 2 + 2, lin_4n = 2 * 4 * 2 + 2;
  // grid embed (4 -> 2) on n; encoder: receivers m and senders n through 2x2 without bias, edges (shared) 2x2,
  // node MLP (4 -> 2) on m; grid update (2 -> 2) on n; decoder: receivers n, senders m, edges (shared), node
  // MLP on n; output (2 -> 1) on n; shared embeddings: mesh (3 -> 2) on m, g2m, mesh and m2g edges (4 -> 2).
  const double per_sample = n * lin_4_2 + (m + n) * lin_2_2_nobias + m * lin_4n + n * lin_2_2 + (n + m) * lin_2_2_nobias + n * lin_4n +
                            n * (2 * 2 * 1 + 1);
  const double per_batch = e1 * lin_2_2 + e3 * lin_2_2 + m * (2 * 3 * 2 + 2) + (e1 + static_cast<double>(g.mesh.size()) + e3) * lin_4_2;
  EXPECT_DOUBLE_EQ(gnn_forward_flops(tiny, g, 4), per_sample + per_batch / 4);
}

}  // namespace
}  // namespace bellows::models
