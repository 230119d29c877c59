// What a finished (or interrupted) fit reports; a plain record, so that callers of a run need no tensor headers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace bellows::train {

struct FitResult {
  std::int64_t steps = 0;           // optimizer steps taken, skipped ones included (as in PyTorch)
  std::int64_t skipped_steps = 0;   // of them, skipped on non-finite gradients (nothing changed by them)
  std::int64_t epochs_completed = 0;  // by this fit() call
  std::int64_t epochs_in_all = 0;     // by the run, those before a resume included
  std::int64_t samples = 0;         // samples trained, those before a resume included
  std::int64_t new_samples = 0;     // of them, trained by this fit() call (the throughput's numerator)
  double seconds = 0;
  double final_loss = 0;            // mean training loss over the last logging window
  std::optional<double> last_eval;  // the task's monitor metric at the last evaluation
  std::int64_t oom_recoveries = 0;  // out-of-memory errors recovered from by halving the micro-batch (this fit)
  std::int64_t micro_split = 1;     // each loaded batch ran as this many micro-batches at the end
  bool interrupted = false;
  bool already_complete = false;    // the run had taken its planned steps before this fit (a resumed finished run)
  std::filesystem::path checkpoint;  // the last checkpoint written (empty: none)
};

}  // namespace bellows::train
