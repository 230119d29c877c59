// What a training checkpoint holds beyond the Trainer's own state_dict: the model's parameters and buffers
// by name, and every RNG state (CPU and each CUDA device), so that a resumed run draws the same dropout
// masks. The Trainer assembles checkpoints with these (Trainer::save_checkpoint / restore).
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

struct CheckpointOptions {
  std::filesystem::path dir;        // empty: no checkpoints
  std::int64_t every_n_steps = 0;   // 0: not by steps
  double every_n_minutes = 0;       // 0: not by time
  std::int64_t keep_last = 3;       // 0: keep all
  bool keep_best = true;            // also keep the checkpoint with the best monitored metric
  bool at_end = true;               // when the run finishes
  bool on_stop = true;              // when a stop is requested (SIGINT/SIGTERM): then exit code 5
  // kWhole: rank 0 writes every tensor (the others' shares gathered to it); kSharded: every rank writes what it
  // holds, in parallel, and rank 0 the manifest (ckpt/sharded.h). checkpoint.layout auto: the strategy entry's.
  enum class Layout { kWhole, kSharded } layout = Layout::kWhole;
};

// Parameters and buffers by their dotted names (as PyTorch's state_dict names them).
std::map<std::string, at::Tensor> model_tensors(const torch::nn::Module& model);

// Copies `tensors` into the model's parameters and buffers (onto their device and dtype). strict: every
// tensor of the model must be present with the same shape, and nothing extra, else one kData error listing
// each difference. Not strict: loads what matches; returns the differences (empty when everything matched).
std::vector<std::string> load_model_tensors(torch::nn::Module& model, const std::map<std::string, at::Tensor>& tensors, bool strict);

// The same for a part of the model and other sources of weights (pretrained files, an encoder): one loader for
// resume, init_weights and a model's own imports.
struct TensorLoadOptions {
  bool strict = true;
  std::string prefix;                     // only model tensors whose names start with it; `tensors` names are relative to it
  std::string source = "the checkpoint";  // in messages: "<name>: missing from <source>"
  std::string subject;                    // the error's subject ("weights file w.safetensors"); empty: `source`
  std::string target = "the model";       // "<name>: shape [..] in <source>, [..] in <target>"
  std::string hint = "resume with the same model configuration, or load with strict: false to take what matches";
};
std::vector<std::string> load_model_tensors(torch::nn::Module& model, const std::map<std::string, at::Tensor>& tensors,
                                            const TensorLoadOptions& options);

StateDict rng_state();                      // "cpu", "cuda.<i>": the default generators' states
void load_rng_state(const StateDict& state);  // devices missing here or there are skipped

}  // namespace bellows::train
