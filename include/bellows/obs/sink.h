// Sinks receive the training run's records after the timed region of a step: the console (progress bar on
// a terminal, plain lines otherwise), metrics.jsonl, and whatever a user adds. Nothing in the hot path
// formats text; a sink sees only numbers already read from the device.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bellows::obs {

using Values = std::vector<std::pair<std::string, double>>;

struct RunStart {
  std::string run_name;
  std::string run_dir;
  std::vector<std::pair<std::string, std::string>> header;  // machine and plan lines, printed at start
  std::int64_t epochs = 0;
  std::int64_t batches_per_epoch = 0;
  std::int64_t total_steps = 0;  // optimizer steps planned
};

struct StepRecord {
  std::int64_t step = 0;             // optimizer steps taken (after this one)
  std::int64_t epoch = 0;            // 0-based
  std::int64_t batch_in_epoch = 0;   // batches consumed in this epoch
  std::int64_t batches_per_epoch = 0;
  double elapsed_s = 0;              // since the run started
  double epoch_elapsed_s = 0;        // since this epoch started
  double samples_per_s = 0;          // over the logging window
  double step_time_ms = 0;           // mean over the logging window
  double lr = 0;
  Values values;                     // loss, metrics, grad_norm, loss_scale, skipped_steps ... (window means)
  // values[0, task_values): the loss and the task's metrics, the numbers a person reads on the console (the rest
  // go to metrics.jsonl and TensorBoard).
  std::size_t task_values = 1;
  // Where a step's time went, in ms per optimizer step (window means), by phase: data, copy, forward, backward,
  // optimizer, other (obs/phase_clock.h). Their sum is the window's wall time per step, up to the record's own
  // reading; empty when not measured.
  Values phase_ms;
  // The peak of tensor memory during each phase over the window, in MB (obs/phase_clock.h), for the phases
  // measured; empty when the device's memory is not counted.
  Values phase_mem_mb;
};

struct EvalRecord {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  bool ema = false;  // evaluated with EMA weights
  Values values;
};

// A checkpoint written: where, why, its layout, how long the step waited for it, and per rank the tensor memory held
// before it, at its peak while it was written, and the largest peak of a training step so far (the memory a layout
// costs: docs/distributed.md). Values named "<name>" are rank 0's, "<name>_rank<r>" rank r's.
struct CheckpointRecord {
  std::int64_t step = 0;
  std::string path;
  std::string reason;  // end, every_n_steps, every_n_minutes, stop, error, save
  std::string layout;  // whole | sharded
  double seconds = 0;  // the step's wait: a whole layout's host copy, or the sharded layout's write
  Values values;       // mem_held_mb, mem_peak_mb, train_peak_mb (per rank)
};

struct RunEnd {
  std::vector<std::pair<std::string, std::string>> summary;  // printed as a table
  bool interrupted = false;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void on_run_start(const RunStart& start) {}
  virtual void on_step(const StepRecord& record) {}
  virtual void on_epoch_end(std::int64_t epoch, const StepRecord& last) {}
  virtual void on_eval(const EvalRecord& record) {}
  virtual void on_message(const std::string& text) {}  // warnings and notices ("step 41 skipped: ...")
  virtual void on_checkpoint(const CheckpointRecord& record) {}
  virtual void on_run_end(const RunEnd& end) {}
};

}  // namespace bellows::obs
