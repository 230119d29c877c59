// Exponential moving average of a model's parameters (and a copy of its buffers):
//   ema = decay * ema + (1 - decay) * param, every `every_n_steps` optimizer steps.
// For evaluation with EMA weights, swap() exchanges live and EMA values in place (call again to restore).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

struct EmaOptions {
  double decay = 0.999;            // in [0, 1]
  std::int64_t every_n_steps = 1;  // >= 1; the decay is applied per update, not scaled by every_n_steps
  std::int64_t start_step = 0;     // no averaging before this optimizer step (the EMA copies the weights)
};

class Ema {
 public:
  // `tensors`: the model's named parameters and buffers. Floating-point tensors that require gradients are
  // averaged, in fp32 copies (fp64 for fp64 parameters) on the same device. Everything else (buffers such
  // as BatchNorm statistics and counters, frozen parameters) is copied, not averaged, in its own dtype: an
  // average of running statistics would describe no model, and the copy keeps the EMA model whole, so its
  // weights can be evaluated or exported as they are. The choice is made here, once. A tensor listed twice
  // (tied weights) is tracked once, under its first name. kConfig errors for options out of range.
  Ema(const std::vector<std::pair<std::string, at::Tensor>>& tensors, EmaOptions options);

  // Call after each optimizer step with the number of optimizer steps taken so far. Before start_step it
  // copies; from start_step on it averages when optimizer_step % every_n_steps == 0 (copying the buffers).
  // `skipped` (optional; float32, one element, 1 = the optimizer skipped this step on non-finite gradients):
  // averaging then leaves the EMA exactly as it was, decided on the device (no sync); the copies before
  // start_step and of buffers still run (they copy values the skipped step did not change).
  void update(std::int64_t optimizer_step, const at::Tensor& skipped = {});

  // The same update inside a step captured as a CUDA graph (train/graph_step.h), with no decision on the host in
  // it: update_on_device() is what the graph records, the averaged tensors lerped by copy + average x (1 - skipped),
  // two device scalars per bucket that prepare_step() fills before each step that runs (copy 1, average 0 before
  // start_step: a lerp by 1 is the copy; copy 0, average 1 - decay from it on), the buffers copied. The same values
  // as update() bit for bit where the live weights are finite. Only where every optimizer step updates:
  // capture_unfit() says why not ("" when it can).
  std::string capture_unfit() const;
  void prepare_step(std::int64_t optimizer_step);
  void update_on_device(const at::Tensor& skipped);
  // Exchanges live and EMA values in place (for eval, and back). Swapping twice restores both exactly. While
  // swapped, update() and load_state_dict() are errors; state_dict() and averaged() still give EMA values.
  void swap();
  bool swapped() const { return swapped_; }
  std::int64_t updates() const { return updates_; }  // averaging updates done

  // The EMA values by name (aliases of the held tensors: clone before changing them).
  std::vector<std::pair<std::string, at::Tensor>> averaged() const;

  // "weights.<name>" for every tracked tensor and "updates". Tensors alias the held state.
  StateDict state_dict() const;
  // Copies the values in (to the EMA copies' device and dtype). A missing entry, a shape mismatch or an entry
  // naming no tracked tensor is a kData error naming it; on error nothing changes.
  void load_state_dict(const StateDict& state);

 private:
  struct Entry {
    std::string name;
    at::Tensor live;   // the model's tensor
    at::Tensor ema;    // our copy
    at::Tensor stash;  // while swapped, when dtypes differ: the live values
    bool averaged;     // else copied
  };
  const at::Tensor& ema_value(const Entry& e) const;
  void plan_update();  // fills plan_ and copies_ from entries_

  struct Bucket {
    std::vector<at::Tensor> ema, live;
    bool widen;  // live is narrower than the EMA (bf16 weights, fp32 average)
  };
  static std::vector<at::Tensor> lerp_sources(const Bucket& bucket);  // the live tensors in the EMA's dtype

  EmaOptions options_;
  std::vector<Entry> entries_;
  std::vector<Bucket> plan_;                                             // averaged entries, per device and dtypes
  std::vector<std::pair<at::Tensor, at::Tensor>> shares_;                // per bucket: the captured update's copy and average weights
  std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> copies_;  // (EMA, live) of the copied entries
  std::int64_t updates_ = 0;
  bool swapped_ = false;
};

}  // namespace bellows::train
