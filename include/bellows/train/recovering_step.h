// Out-of-memory recovery (TrainerOptions::oom_recovery) as a StepRunner (train/step_runner.h) around an EagerStep:
// it keeps the step's loaded batches and, from before the step, the buffers and RNG states (train/step_undo.h). An
// out-of-memory error in a micro-batch's copy, forward or backward puts all of that back, zeroes the gradients,
// doubles MicroSplit::parts and runs the step again from its first sample, so the effective batch, the sample order
// and the result are those of a run planned with the smaller micro-batch. With several ranks ("together") their
// backward passes do not communicate, and after the step's micro-batches the ranks agree (one blocking all-reduce of
// two flags) whether any ran out of memory and whether any cannot make its micro-batch smaller: then all retry with
// half the micro-batch, or all stop. Also the out-of-memory report of a fit that could not recover.
#pragma once

#include <c10/core/Device.h>

#include <exception>
#include <memory>
#include <string>

#include "bellows/train/eager_step.h"
#include "bellows/train/step_runner.h"
#include "bellows/train/step_undo.h"
#include "bellows/util/error.h"
#include "bellows/util/exception_report.h"  // defines: ExceptionReport

namespace bellows::train {

class RecoveringStep final : public StepRunner {
 public:
  RecoveringStep(const StepParts& parts, std::unique_ptr<EagerStep> eager, bool together);
  StepResult run(StepBatches& batches) override;

 private:
  StepResult run_alone(StepBatches& batches, std::vector<data::Batch>& loaded);
  void agree_and_retry(StepBatches& batches, const std::vector<data::Batch>& loaded, StepResult& result);
  // Why a micro-batch of the loaded `batch` cannot be made smaller ("" when it can): not splittable, or 1 sample.
  std::string split_problem(const data::Batch& batch) const;
  // Puts back the state before the step and halves the micro-batch (every rank alike with several); `failed_in` names
  // where it ran out of memory ("in its forward phase", "on rank 1").
  void split(std::int64_t batch_size, std::int64_t number, const std::string& failed_in);

  StepParts p_;
  std::unique_ptr<EagerStep> eager_;
  bool together_;
  StepUndo undo_;
  std::exception_ptr failure_;  // together: this rank's out-of-memory error in this attempt
  std::int64_t failed_at_ = 0;  // the loaded batch it failed in
};

// Throws the out-of-memory error that ends a fit (kResource, exit code 4): where in the step it happened (`last`: the last
// phase that ended, from PhaseClock::last; after an optimizer phase the step `step` was done, and what failed is what
// follows it), what the memory held, and `note` (why it was not recovered from).
[[noreturn]] void fail_out_of_memory(const ExceptionReport& report, c10::Device device, obs::Phase last, std::int64_t step,
                                     const std::string& note);

// From a catch block around a part of a run that feeds the model a batch: LibTorch's error (a shape that does not
// fit, a label out of range, a scripted model's exception) as a `kind` error that says where (`where`: "the forward
// and loss of optimizer step 51", "the evaluation after step 50"), the batch's shapes and LibTorch's message with a
// scripted model's source line. bellows' own errors and out-of-memory errors are rethrown as they are.
[[noreturn]] void rethrow_with_batch(const std::string& where, const data::Batch& batch, ErrorKind kind);

}  // namespace bellows::train
