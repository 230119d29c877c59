// The regional weather graph network and its registration as model "gnn"; see gnn.h. The grid comes from the
// NetCDF training data (or, without data, from model.lat/model.lon or the file at data.path), so the same
// config rebuilds the same graph when a checkpoint is loaded.
#include "bellows/models/gnn.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/models/flops.h"
#include "bellows/models/linear.h"
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"

namespace bellows::models {
namespace {

constexpr std::int64_t kPositionFeatures = 3;  // RegionalGraph node features
constexpr std::int64_t kEdgeFeatures = 4;      // EdgeSet features

at::Tensor activate(const at::Tensor& x, const std::string& name) {
  if (name == "silu") return at::silu(x);
  if (name == "gelu") return at::gelu(x);
  if (name == "relu") return at::relu(x);
  return at::tanh(x);
}

}  // namespace

at::Tensor scatter_sum(const at::Tensor& values, const at::Tensor& index, std::int64_t size) {
  BELLOWS_CHECK(values.dim() >= 2 && index.dim() == 1 && index.size(0) == values.size(-2),
                fmt::format("scatter_sum: values {} and index {} do not match ([..., E, F] and [E])", values.sizes(), index.sizes()),
                "pass one index per edge");
  std::vector<std::int64_t> shape = values.sizes().vec();
  shape[shape.size() - 2] = size;
  return at::zeros(shape, values.options()).index_add_(values.dim() - 2, index, values);
}

// --- GraphMlp ---

GraphMlpImpl::GraphMlpImpl(std::int64_t in, std::int64_t hidden, std::int64_t out, std::int64_t hidden_layers,
                           std::string activation, bool layer_norm)
    : activation_(std::move(activation)) {
  std::vector<std::int64_t> widths{in};
  for (std::int64_t i = 0; i < hidden_layers; ++i) widths.push_back(hidden);
  widths.push_back(out);
  torch::nn::ModuleList layers;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    linears_.emplace_back(widths[i], widths[i + 1]);
    layers->push_back(linears_.back());
  }
  register_module("layers", layers);
  if (layer_norm) norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out})));
}

at::Tensor GraphMlpImpl::forward(const at::Tensor& x) { return tail(linear(linears_.front(), x)); }

at::Tensor GraphMlpImpl::tail(const at::Tensor& first_linear_output) {
  at::Tensor h = first_linear_output;
  for (std::size_t i = 0; i < linears_.size(); ++i) {
    if (i > 0) h = linear(linears_[i], h);
    if (i + 1 < linears_.size()) h = activate(h, activation_);
  }
  return norm_ ? norm_->forward(h) : h;
}

// --- Interaction ---

InteractionImpl::InteractionImpl(std::int64_t latent, std::int64_t hidden_layers, const std::string& activation, bool layer_norm) {
  edge_mlp_ = register_module("edge_mlp", GraphMlp(3 * latent, latent, latent, hidden_layers, activation, layer_norm));
  node_mlp_ = register_module("node_mlp", GraphMlp(2 * latent, latent, latent, hidden_layers, activation, layer_norm));
}

std::vector<at::Tensor> InteractionImpl::forward(const at::Tensor& senders, const at::Tensor& receivers, const at::Tensor& edges,
                                                 const at::Tensor& sender_index, const at::Tensor& receiver_index) {
  // The first Linear of edge_mlp on [e, h_s, h_r], as three products: the node terms are computed once per
  // node and gathered, which is cheaper than gathering latents when edges outnumber nodes (they do here).
  const auto& first = edge_mlp_->first();
  const std::int64_t le = edges.size(-1), ls = senders.size(-1), lr = receivers.size(-1);
  const at::Tensor& w = first->weight;
  // Named, in a fixed order: the operands of one `a + b + c` are evaluated in an order C++ leaves to the compiler,
  // and that order decides how autograd sums the gradients (bitwise). This is the order GCC chose before.
  const at::Tensor from_receivers = at::linear(receivers, w.narrow(1, le + ls, lr)).index_select(-2, receiver_index);
  const at::Tensor from_senders = at::linear(senders, w.narrow(1, le, ls)).index_select(-2, sender_index);
  const at::Tensor from_edges = at::linear(edges, w.narrow(1, 0, le), first->bias);
  const at::Tensor h = from_edges + from_senders + from_receivers;
  const at::Tensor e = edges + edge_mlp_->tail(h);
  const at::Tensor aggregated = scatter_sum(e, receiver_index, receivers.size(-2));
  const at::Tensor r = receivers + node_mlp_->forward(at::cat({receivers, aggregated.to(receivers.scalar_type())}, -1));
  return {r, e};
}

// --- Gnn ---

GnnImpl::GnnImpl(const GnnOptions& options) : options_(options) {
  const GnnOptions& o = options_;
  BELLOWS_CHECK_CONFIG(o.in_channels > 0 && o.out_channels > 0,
                       fmt::format("graph network in_channels={} out_channels={}, expected positive", o.in_channels, o.out_channels),
                       "set model.in_channels and model.out_channels, or train from a NetCDF file that defines them");
  BELLOWS_CHECK_CONFIG(o.latent_size > 0, fmt::format("model.latent_size {} is not positive", o.latent_size), "set model.latent_size (e.g. 128)");
  BELLOWS_CHECK_CONFIG(o.num_gnn_layers >= 0 && o.mlp_layers >= 0,
                       fmt::format("model.num_gnn_layers {} / model.mlp_layers {} negative", o.num_gnn_layers, o.mlp_layers),
                       "use 0 or more layers");
  BELLOWS_CHECK_CONFIG(o.activation == "silu" || o.activation == "gelu" || o.activation == "relu" || o.activation == "tanh",
                       fmt::format("unknown activation '{}'", o.activation), "use one of: silu, gelu, relu, tanh");
  BELLOWS_CHECK_CONFIG(o.residual_channels.empty() || static_cast<std::int64_t>(o.residual_channels.size()) == o.out_channels,
                       fmt::format("{} residual channels for {} output channels", o.residual_channels.size(), o.out_channels),
                       "give one input channel per output channel, or none to predict the full state");
  for (const std::int64_t c : o.residual_channels) {
    BELLOWS_CHECK_CONFIG(c >= 0 && c < o.in_channels, fmt::format("residual channel {} outside [0, {})", c, o.in_channels),
                         "residual channels index the input channels");
  }
  graph_ = build_regional_graph(o.lat, o.lon, o.mesh);

  const std::int64_t l = o.latent_size, k = o.mlp_layers;
  const auto mlp = [&](std::int64_t in, std::int64_t out, bool norm) { return GraphMlp(in, l, out, k, o.activation, norm); };
  // --- encoder: embeddings, grid -> mesh ---
  grid_embed_ = register_module("grid_embed", mlp(o.in_channels + kPositionFeatures, l, o.layer_norm));
  mesh_embed_ = register_module("mesh_embed", mlp(kPositionFeatures, l, o.layer_norm));
  g2m_edge_embed_ = register_module("g2m_edge_embed", mlp(kEdgeFeatures, l, o.layer_norm));
  mesh_edge_embed_ = register_module("mesh_edge_embed", mlp(kEdgeFeatures, l, o.layer_norm));
  m2g_edge_embed_ = register_module("m2g_edge_embed", mlp(kEdgeFeatures, l, o.layer_norm));
  encoder_ = register_module("encoder", Interaction(l, k, o.activation, o.layer_norm));
  grid_update_ = register_module("grid_update", mlp(l, l, o.layer_norm));
  // --- processor on the mesh ---
  torch::nn::ModuleList processor;
  for (std::int64_t i = 0; i < o.num_gnn_layers; ++i) processor->push_back(Interaction(l, k, o.activation, o.layer_norm));
  processor_ = register_module("processor", processor);
  // --- decoder: mesh -> grid, output ---
  decoder_ = register_module("decoder", Interaction(l, k, o.activation, o.layer_norm));
  output_ = register_module("output", mlp(l, o.out_channels, false));
}

std::vector<std::string> GnnImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  for (std::int64_t i = 0; i < options_.num_gnn_layers; ++i) names.push_back(fmt::format("processor.{}", i));
  return names;
}

const GnnImpl::DeviceGraph& GnnImpl::on(const at::Tensor& x) {
  if (cache_.grid_features.defined() && cache_.key.device() == x.device() && cache_.key.dtype() == x.dtype()) return cache_;
  const at::TensorOptions f = x.options(), i = x.options().dtype(at::kLong);
  DeviceGraph d;
  d.key = f;
  d.grid_features = graph_.grid_features.to(f);
  d.mesh_features = graph_.mesh_features.to(f);
  d.g2m_send = graph_.grid_to_mesh.senders.to(i);
  d.g2m_recv = graph_.grid_to_mesh.receivers.to(i);
  d.g2m_features = graph_.grid_to_mesh.features.to(f);
  d.mesh_send = graph_.mesh.senders.to(i);
  d.mesh_recv = graph_.mesh.receivers.to(i);
  d.mesh_edge_features = graph_.mesh.features.to(f);
  d.m2g_send = graph_.mesh_to_grid.senders.to(i);
  d.m2g_recv = graph_.mesh_to_grid.receivers.to(i);
  d.m2g_features = graph_.mesh_to_grid.features.to(f);
  if (!options_.residual_channels.empty()) d.residual_index = at::tensor(options_.residual_channels, at::kLong).to(i);
  cache_ = std::move(d);
  return cache_;
}

at::Tensor GnnImpl::forward(const at::Tensor& x) {
  const GnnOptions& o = options_;
  BELLOWS_CHECK_DATA(x.dim() == 4 && x.size(1) == o.in_channels && x.size(2) == graph_.n_lat && x.size(3) == graph_.n_lon,
                     fmt::format("graph network input has shape {}, expected [batch, {}, {}, {}] (channels, lat, lon)", x.sizes(),
                                 o.in_channels, graph_.n_lat, graph_.n_lon),
                     "train on the NetCDF grid the model was built for, with the same variables");
  const DeviceGraph& g = on(x);
  const std::int64_t b = x.size(0), n = graph_.grid_nodes(), m = graph_.mesh_nodes(), l = o.latent_size;

  // --- encode: embed nodes and edges, pass grid -> mesh ---
  const at::Tensor nodes = x.permute({0, 2, 3, 1}).reshape({b, n, o.in_channels});
  at::Tensor grid = grid_embed_->forward(at::cat({nodes, g.grid_features.unsqueeze(0).expand({b, n, kPositionFeatures})}, -1));
  at::Tensor mesh = mesh_embed_->forward(g.mesh_features).unsqueeze(0).expand({b, m, l});
  mesh = encoder_->forward(grid, mesh, g2m_edge_embed_->forward(g.g2m_features).unsqueeze(0), g.g2m_send, g.g2m_recv)[0];
  grid = grid + grid_update_->forward(grid);

  // --- process: message passing on the mesh, each layer a checkpointable block ---
  at::Tensor edges = mesh_edge_embed_->forward(g.mesh_edge_features).unsqueeze(0);
  for (std::int64_t i = 0; i < o.num_gnn_layers; ++i) {
    auto layer = processor_->ptr<InteractionImpl>(static_cast<std::size_t>(i));
    // Captured by value: a checkpointed block runs again in backward, after this frame has returned.
    BlockFunction fn = [layer, send = g.mesh_send, recv = g.mesh_recv](const std::vector<at::Tensor>& in) {
      return layer->forward(in[0], in[0], in[1], send, recv);
    };
    const auto out = run_block(block_name(static_cast<std::size_t>(i)), *layer, fn, {mesh, edges});
    mesh = out[0];
    edges = out[1];
  }

  // --- decode: pass mesh -> grid, predict the targets ---
  grid = decoder_->forward(mesh, grid, m2g_edge_embed_->forward(g.m2g_features).unsqueeze(0), g.m2g_send, g.m2g_recv)[0];
  at::Tensor y = output_->forward(grid).reshape({b, graph_.n_lat, graph_.n_lon, o.out_channels}).permute({0, 3, 1, 2});
  if (g.residual_index.defined()) y = y + x.index_select(1, g.residual_index);
  return y;
}

// --- analytic FLOPs ---
namespace {

// One GraphMlp over `rows` rows: in -> latent (hidden_layers times) -> out, and its LayerNorm.
double graph_mlp_flops(double rows, std::int64_t in, std::int64_t out, const GnnOptions& o, bool norm) {
  std::vector<std::int64_t> widths{in};
  for (std::int64_t i = 0; i < o.mlp_layers; ++i) widths.push_back(o.latent_size);
  widths.push_back(out);
  double flops = 0;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) flops += linear_flops(rows, widths[i], widths[i + 1]);
  return flops + (norm ? norm_flops(rows * static_cast<double>(out)) : 0.0);
}

// One Interaction per sample (InteractionImpl::forward): the first edge Linear split into node and edge products,
// the rest of the edge MLP on every edge, the node MLP on every receiver. `shared_edges`: the edge latents are the
// same for the whole batch (an embedding), so their product counts 1/batch.
double interaction_flops(double senders, double receivers, double edges, bool shared_edges, double batch, const GnnOptions& o) {
  const std::int64_t l = o.latent_size;
  double flops = linear_flops(receivers, l, l, /*bias=*/false) + linear_flops(senders, l, l, /*bias=*/false);
  flops += linear_flops(edges, l, l) / (shared_edges ? batch : 1.0);
  for (std::int64_t i = 0; i < o.mlp_layers; ++i) flops += linear_flops(edges, l, l);  // the edge MLP's tail
  if (o.layer_norm) flops += norm_flops(edges * static_cast<double>(l));
  return flops + graph_mlp_flops(receivers, 2 * l, l, o, o.layer_norm);
}

}  // namespace

double gnn_forward_flops(const GnnOptions& o, const RegionalGraph& g, std::int64_t batch) {
  const auto n = static_cast<double>(g.grid_nodes()), m = static_cast<double>(g.mesh_nodes());
  const auto g2m = static_cast<double>(g.grid_to_mesh.size()), mesh = static_cast<double>(g.mesh.size()),
             m2g = static_cast<double>(g.mesh_to_grid.size());
  const auto b = static_cast<double>(std::max<std::int64_t>(1, batch));
  const std::int64_t l = o.latent_size;
  // --- once per batch: the static node and edge embeddings ---
  const double shared = graph_mlp_flops(m, kPositionFeatures, l, o, o.layer_norm) + graph_mlp_flops(g2m, kEdgeFeatures, l, o, o.layer_norm) +
                        graph_mlp_flops(mesh, kEdgeFeatures, l, o, o.layer_norm) + graph_mlp_flops(m2g, kEdgeFeatures, l, o, o.layer_norm);
  // --- per sample: encode, process, decode ---
  double flops = graph_mlp_flops(n, o.in_channels + kPositionFeatures, l, o, o.layer_norm);
  flops += interaction_flops(n, m, g2m, /*shared_edges=*/true, b, o) + graph_mlp_flops(n, l, l, o, o.layer_norm);
  for (std::int64_t i = 0; i < o.num_gnn_layers; ++i) flops += interaction_flops(m, m, mesh, /*shared_edges=*/i == 0, b, o);
  flops += interaction_flops(m, n, m2g, /*shared_edges=*/true, b, o) + graph_mlp_flops(n, l, o.out_channels, o, false);
  return flops + shared / b;
}

// --- registration: model "gnn" ---
namespace {

bool same_coordinates(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) > 1e-6 * std::max(1.0, std::abs(a[i]))) return false;
  }
  return true;
}

// The model.* keys of GnnOptions, bound once (config/binding.h). options_from turns model.residual into
// residual_channels, which need the data's channel names.
const config::Binding<GnnOptions>& gnn_binding() {
  using O = GnnOptions;
  using M = MeshOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("latent_size", &O::latent_size, "width of node and edge latents").min(1);
    b.key("num_gnn_layers", &O::num_gnn_layers, "message-passing layers of the processor on the mesh").min(0);
    b.key("mlp_layers", &O::mlp_layers, "hidden layers in each MLP (0: one Linear)").min(0);
    b.key("activation", &O::activation, "activation").choices({"silu", "gelu", "relu", "tanh"});
    b.key("layer_norm", &O::layer_norm, "LayerNorm after each MLP but the output");
    config::Binding<M> mesh("model.", O{}.mesh);
    mesh.key("mesh_stride", &M::stride, "grid points per mesh cell side").min(1);
    mesh.key("mesh_levels", &M::levels, "mesh scales: level k adds edges between every 2^k-th mesh node").min(1);
    mesh.key("g2m_radius", &M::g2m_radius, "grid->mesh edges reach this fraction of the longest mesh edge").min(1e-6);
    b.nest(&O::mesh, mesh);
    // 0 takes the data's channels (options_from); the struct's 8 are for C++ callers.
    b.key("in_channels", &O::in_channels, "input channels (0: from the data)").min(0).default_value(YAML::Node(0));
    b.key("out_channels", &O::out_channels, "target channels (0: from the data)").min(0).default_value(YAML::Node(0));
    b.key("lat", &O::lat, "grid latitudes in degrees (empty: from the data)");
    b.key("lon", &O::lon, "grid longitudes in degrees (empty: from the data)");
    b.key("residual", &O::residual, "predict the change of each target channel from the input channel of the same name");
  });
}

GnnOptions options_from(const config::Config& c, const ModelContext& context) {
  GnnOptions o = gnn_binding().read(c);

  // --- the grid: model.lat/lon, else the data's (its source's facts: the NetCDF file, or its header alone when
  // the model is rebuilt from a checkpoint's config) ---
  const data::GridFacts* grid = context.facts.grid ? &*context.facts.grid : nullptr;
  const std::string source = !context.facts.source.empty() ? context.facts.source : context.train ? context.train->name() : std::string("no data");
  for (const auto& [key, dim, given, from_data] :
       {std::tuple{"model.lat", "lat", &o.lat, grid ? &grid->lat : nullptr}, std::tuple{"model.lon", "lon", &o.lon, grid ? &grid->lon : nullptr}}) {
    if (given->empty()) {
      BELLOWS_CHECK_CONFIG(from_data != nullptr,
                           fmt::format("model gnn: {} is empty and the grid cannot come from the data ({})", key, source),
                           "train from a NetCDF file (data.source: netcdf, data.path) or set model.lat and model.lon in degrees");
      BELLOWS_CHECK_DATA(!from_data->empty(),
                         fmt::format("model gnn: {} has no coordinate variable for its {} dimension", source, dim),
                         fmt::format("add the coordinate variable to the file, or set {} in degrees", key));
      *given = *from_data;
    } else if (from_data != nullptr) {
      BELLOWS_CHECK_CONFIG(same_coordinates(*given, *from_data),
                           fmt::format("model gnn: {} ({} values) differs from the data's coordinates ({} values, {})", key,
                                       given->size(), from_data->size(), source),
                           fmt::format("remove {} to take the grid from the data", key));
    }
  }

  // --- channels: from the data when it names them; model.in/out_channels otherwise (or as a check) ---
  const std::int64_t in_key = o.in_channels, out_key = o.out_channels;  // as configured (0: the data's)
  std::vector<std::string> in_names, out_names;
  if (grid) {
    in_names = grid->input_channels;
    out_names = grid->target_channels;
  } else if (context.train) {
    const data::Batch one = data::first_sample(*context.train);
    BELLOWS_CHECK_CONFIG(one.at("x").dim() == 4 && (!one.tensors.count("y") || one.at("y").dim() == 4),
                         fmt::format("model gnn reads samples x [C, lat, lon], but {} gives x of shape {}", source,
                                     one.at("x").sizes().slice(1)),
                         "train from a NetCDF file (data.source: netcdf) or arrays shaped [samples, channels, lat, lon]");
    if (in_key == 0) o.in_channels = one.at("x").size(1);
    if (out_key == 0 && one.tensors.count("y")) o.out_channels = one.at("y").size(1);
  }
  if (grid) {
    const auto n_in = static_cast<std::int64_t>(in_names.size()), n_out = static_cast<std::int64_t>(out_names.size());
    BELLOWS_CHECK_CONFIG((in_key == 0 || in_key == n_in) && (out_key == 0 || out_key == n_out),
                         fmt::format("model.in_channels {} / model.out_channels {}, but the data has {} -> {} channels ({})", in_key,
                                     out_key, n_in, n_out, source),
                         "set them to 0 to take the channels from the data");
    o.in_channels = n_in;
    o.out_channels = n_out;
  }
  BELLOWS_CHECK_CONFIG(o.in_channels > 0 && o.out_channels > 0,
                       fmt::format("model gnn: the channels are unknown ({}: in {}, out {})", source, o.in_channels, o.out_channels),
                       "set model.in_channels and model.out_channels, or train from a NetCDF file");

  // --- residual: each target channel adds the input channel of the same name ---
  if (o.residual) {
    if (!in_names.empty()) {
      for (const auto& name : out_names) {
        const auto it = std::find(in_names.begin(), in_names.end(), name);
        BELLOWS_CHECK_CONFIG(it != in_names.end(),
                             fmt::format("model.residual is true but target channel '{}' is not an input channel (inputs: {})", name,
                                         fmt::join(in_names, ", ")),
                             "set model.residual: false to predict the full state, or add the variable to data.netcdf.variables");
        o.residual_channels.push_back(it - in_names.begin());
      }
    } else {
      BELLOWS_CHECK_CONFIG(o.in_channels == o.out_channels,
                           fmt::format("model.residual is true but inputs ({}) and targets ({}) have different channels", o.in_channels,
                                       o.out_channels),
                           "set model.residual: false to predict the full state");
      for (std::int64_t k = 0; k < o.out_channels; ++k) o.residual_channels.push_back(k);
    }
  }
  return o;
}

ModelEntry gnn_entry() {
  ModelEntry e;
  e.name = "gnn";
  e.help = "encode-process-decode graph network on a regional lat/lon grid and mesh (W6); task: regression";
  // Narrow latents and two processor layers; the grid and the channels are the data's (its grid facts).
  e.demo.yaml = R"(data:
  source: synthetic
  kind: grid
  samples: 512
  channels: 3
  side: 16
  batch_size: 16
  val_fraction: 0.1
model:
  name: gnn
  latent_size: 32
  num_gnn_layers: 2
)";
  e.demo.data =
      "a synthetic grid (3 fields on 16 x 16 points of a 10 x 10 degree region, predicted one step on; 512 samples)";
  e.add_keys = [](config::Schema& s) { gnn_binding().declare(s); };
  e.forward_flops = [](const config::Config& c, const ModelContext& context) -> std::optional<double> {
    const GnnOptions o = options_from(c, context);
    // The static embeddings are shared by a batch: counted per sample at the loaded batch (unknown: a batch of one).
    return gnn_forward_flops(o, build_regional_graph(o.lat, o.lon, o.mesh), context.loaded_batch);
  };
  e.forward_flops_basis = "the static mesh and edge embeddings run once per batch and count 1/data.batch_size per sample";
  e.build = [](const config::Config& c, const ModelContext& context) {
    auto module = std::make_shared<GnnImpl>(options_from(c, context));
    Forward forward = [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<GnnImpl&>(m).forward(x); };
    return BuiltModel{module, make_regression_task(forward)};
  };
  return e;
}

const ModelRegistrar kGnnRegistered(gnn_entry());

}  // namespace

}  // namespace bellows::models
