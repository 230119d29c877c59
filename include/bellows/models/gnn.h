// The encode-process-decode graph network of the regional weather model (seed 000, workload W6), after
// GraphCast: grid nodes (input channels + static position features) pass messages to a coarser mesh, a
// processor of message-passing layers runs on the mesh, and the mesh passes messages back to the grid,
// where an MLP predicts the target channels. Inputs x [B, C, lat, lon], outputs [B, C', lat, lon].
// Registered as model "gnn" (regression task, MSE). Its grid and channels come from the NetCDF training data
// (ModelContext.train, also through a train/validation subset); without data (a model rebuilt from a
// checkpoint's config) from model.lat/model.lon and model.in/out_channels, or else from the header and
// coordinates of the NetCDF file at data.path. Checkpoints hold the weights; the graph is rebuilt.
//   GnnOptions o{.in_channels = 8, .out_channels = 8, .lat = ds->lat(), .lon = ds->lon()};
//   Gnn net(o);
//   at::Tensor y = net->forward(x);  // x + predicted change when o.residual_channels is set
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/models/mesh.h"                   // defines: MeshOptions, RegionalGraph

namespace bellows::models {

struct GnnOptions {
  std::int64_t in_channels = 8;
  std::int64_t out_channels = 8;
  std::int64_t latent_size = 128;
  std::int64_t num_gnn_layers = 6;  // processor layers on the mesh
  std::int64_t mlp_layers = 1;      // hidden layers (of latent_size) in every MLP; 0: one Linear
  std::string activation = "silu";  // silu | gelu | relu | tanh
  bool layer_norm = true;           // LayerNorm at the end of every MLP but the output one
  // Residual prediction: output channel k is x[:, residual_channels[k]] plus the network's output (the
  // forecast predicts the change of the state). Empty: the network predicts the full target state.
  std::vector<std::int64_t> residual_channels;
  // model.residual: residual_channels from the data (each target channel's input channel of the same name), where a
  // run builds the model from its keys; the module itself reads residual_channels only.
  bool residual = true;
  std::vector<double> lat, lon;  // the grid's coordinates in degrees
  MeshOptions mesh;
};

// Analytic forward FLOPs per sample of a GnnImpl with these options on `graph` (models/flops.h conventions: the
// Linear layers and LayerNorms; activations, gathers and the scatter-add not counted), for batches of `batch`
// samples: the mesh, edge embeddings and the first edge products of the encoder, the first processor layer and
// the decoder take no sample's data and run once per batch, so they count 1/batch per sample.
double gnn_forward_flops(const GnnOptions& options, const RegionalGraph& graph, std::int64_t batch);

// The scatter-add aggregation of message passing: out[..., n, :] = sum of values[..., e, :] over the edges e
// with index[e] == n. values [..., E, F], index int64 [E] in [0, size); out [..., size, F], zero where no
// edge arrives. One at::index_add over the node dimension.
at::Tensor scatter_sum(const at::Tensor& values, const at::Tensor& index, std::int64_t size);

// An MLP of the graph network: Linear layers with an activation between them and an optional LayerNorm at the
// end. tail() applies everything after the first Linear, so that an edge update can compute the first layer
// on [edge, sender, receiver] as three smaller products (gathering node projections instead of node latents).
class GraphMlpImpl : public torch::nn::Module {
 public:
  GraphMlpImpl(std::int64_t in, std::int64_t hidden, std::int64_t out, std::int64_t hidden_layers, std::string activation,
               bool layer_norm);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor tail(const at::Tensor& first_linear_output);
  const torch::nn::Linear& first() const { return linears_.front(); }

 private:
  std::vector<torch::nn::Linear> linears_;
  torch::nn::LayerNorm norm_{nullptr};
  std::string activation_;
};
TORCH_MODULE(GraphMlp);

// One message-passing step from sender to receiver nodes (an interaction network with residual updates):
//   e' = e + edge_mlp([e, h_sender, h_receiver]);  h_receiver' = h_receiver + node_mlp([h_receiver, sum of e' in])
class InteractionImpl : public torch::nn::Module {
 public:
  InteractionImpl(std::int64_t latent, std::int64_t hidden_layers, const std::string& activation, bool layer_norm);
  // senders [B, Ns, L], receivers [B, Nr, L], edges [B or 1, E, L]; returns {receivers', edges'}.
  std::vector<at::Tensor> forward(const at::Tensor& senders, const at::Tensor& receivers, const at::Tensor& edges,
                                  const at::Tensor& sender_index, const at::Tensor& receiver_index);

 private:
  GraphMlp edge_mlp_{nullptr}, node_mlp_{nullptr};
};
TORCH_MODULE(Interaction);

// Blocks for activation checkpointing: "processor.0", "processor.1", ...
class GnnImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit GnnImpl(const GnnOptions& options);
  // x [B, in_channels, lat, lon] -> [B, out_channels, lat, lon]. Not thread-safe (the graph's copies on the
  // input's device and dtype are cached on first use).
  at::Tensor forward(const at::Tensor& x);
  std::vector<std::string> checkpoint_blocks() const override;
  const GnnOptions& options() const { return options_; }
  const RegionalGraph& graph() const { return graph_; }

 private:
  // The graph's tensors on one device and dtype. They are not buffers: Module::to(dtype) would turn the int64
  // indices into floats, and the graph is rebuilt from the coordinates rather than stored in checkpoints.
  struct DeviceGraph {
    at::TensorOptions key;
    at::Tensor grid_features, mesh_features;
    at::Tensor g2m_send, g2m_recv, g2m_features, mesh_send, mesh_recv, mesh_edge_features, m2g_send, m2g_recv, m2g_features;
    at::Tensor residual_index;
  };
  const DeviceGraph& on(const at::Tensor& x);

  GnnOptions options_;
  RegionalGraph graph_;
  DeviceGraph cache_;
  GraphMlp grid_embed_{nullptr}, mesh_embed_{nullptr};
  GraphMlp g2m_edge_embed_{nullptr}, mesh_edge_embed_{nullptr}, m2g_edge_embed_{nullptr};
  Interaction encoder_{nullptr};
  GraphMlp grid_update_{nullptr};  // the grid nodes' own residual update in the encoder (GraphCast)
  torch::nn::ModuleList processor_{nullptr};
  Interaction decoder_{nullptr};
  GraphMlp output_{nullptr};
};
TORCH_MODULE(Gnn);

}  // namespace bellows::models
