// Out-of-memory recovery; see recovering_step.h.
#include "bellows/train/recovering_step.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "bellows/dist/strategy.h"
#include "bellows/obs/memory.h"
#include "bellows/train/optimizer.h"
#include "bellows/util/check.h"

namespace bellows::train {

RecoveringStep::RecoveringStep(const StepParts& parts, std::unique_ptr<EagerStep> eager, bool together)
    : p_(parts), eager_(std::move(eager)), together_(together), undo_(parts.model) {}

StepResult RecoveringStep::run(StepBatches& batches) {
  std::vector<data::Batch> loaded;  // the step runs again from its first sample: its batches are kept
  loaded.reserve(static_cast<std::size_t>(batches.count()));
  undo_.save();
  StepResult result = run_alone(batches, loaded);
  if (together_) agree_and_retry(batches, loaded, result);
  result.gradients = eager_->optimizer_phase(batches.number());
  return result;
}

// Each batch as it comes; after an out-of-memory error (one rank) the step starts again from its first batch with
// half the micro-batch. With several ranks the first error ends this rank's attempt: the ranks agree afterwards.
StepResult RecoveringStep::run_alone(StepBatches& batches, std::vector<data::Batch>& loaded) {
  StepResult result;
  const std::int64_t count = batches.count();
  std::int64_t ran = 0;  // loaded batches of this step that ran (since the last retry)
  bool failed = false;   // together: this rank ran out of memory (it runs no more micro-batches, but loads them)
  for (std::int64_t i = 0; i < count; ++i) {
    loaded.push_back(batches.next());
    while (ran <= i && !failed) {
      try {
        eager_->forward_backward(loaded[static_cast<std::size_t>(ran)], count, ran + 1 == count, together_, batches.number(), result);
        ++ran;
      } catch (...) {
        const ExceptionReport report = report_current_exception();
        if (!report.out_of_memory) throw;
        if (together_) {
          failed = true;
          failure_ = std::current_exception();  // agree_and_retry tells the other ranks
          failed_at_ = ran;
          break;
        }
        if (const std::string why = split_problem(loaded[static_cast<std::size_t>(ran)]); !why.empty()) {
          p_.split.note = why;
          throw;
        }
        // The clock's last phase is the last one that ended: the failure was in the one after it.
        const obs::Phase last = p_.clock.last();
        const obs::Phase failed_in = last == obs::Phase::kCopy ? obs::Phase::kForward : last == obs::Phase::kForward ? obs::Phase::kBackward : obs::Phase::kCopy;
        split(loaded[static_cast<std::size_t>(ran)].size, batches.number(), fmt::format("in its {} phase", obs::phase_name(failed_in)));
        ran = 0;
        result = StepResult{};
        result.repeated = true;
      }
    }
  }
  return result;
}

void RecoveringStep::agree_and_retry(StepBatches& batches, const std::vector<data::Batch>& loaded, StepResult& result) {
  const std::int64_t count = batches.count();
  for (;;) {
    const bool failed = static_cast<bool>(failure_);
    const std::string problem = failed ? split_problem(loaded[static_cast<std::size_t>(failed_at_)]) : "";
    std::vector<at::Tensor> flags{at::tensor({failed ? 1.0f : 0.0f, problem.empty() ? 0.0f : 1.0f})};
    p_.strategy.all_reduce_sum(flags);
    const float any_failed = flags[0][0].item<float>(), any_stuck = flags[0][1].item<float>();
    if (any_failed == 0) return;
    if (any_stuck > 0) {
      if (!problem.empty()) {
        p_.split.note = problem;
        const std::exception_ptr error = std::exchange(failure_, nullptr);
        std::rethrow_exception(error);
      }
      BELLOWS_FAIL(ErrorKind::kResource,
                   fmt::format("optimizer step {}: another rank ran out of memory with a micro-batch it cannot make smaller; every rank "
                               "stops (its report names it)", batches.number()),
                   kOutOfMemoryHint);
    }
    split(loaded.front().size, batches.number(),
          failed ? fmt::format("on rank {}", p_.strategy.rank()) : fmt::format("on {:.0f} other rank(s)", any_failed));
    failure_ = nullptr;
    result = StepResult{};
    result.repeated = true;
    for (std::int64_t ran = 0; ran < count; ++ran) {
      try {
        eager_->forward_backward(loaded[static_cast<std::size_t>(ran)], count, ran + 1 == count, /*local=*/true, batches.number(), result);
      } catch (...) {
        if (!report_current_exception().out_of_memory) throw;
        failure_ = std::current_exception();
        failed_at_ = ran;
        break;
      }
    }
  }
}

std::string RecoveringStep::split_problem(const data::Batch& batch) const {
  if (const std::string why = batch.unsplittable(); !why.empty()) return "out-of-memory recovery cannot split the batch: " + why;
  const std::int64_t micro_batch = (batch.size + p_.split.parts - 1) / p_.split.parts;  // the largest part that failed
  if (micro_batch > 1) return "";
  return p_.split.recoveries > 0
             ? fmt::format("a micro-batch of 1 sample ran out of memory after {} out-of-memory recoveries", p_.split.recoveries)
             : "a micro-batch of 1 sample ran out of memory";
}

void RecoveringStep::split(std::int64_t batch_size, std::int64_t number, const std::string& failed_in) {
  const std::int64_t micro_batch = (batch_size + p_.split.parts - 1) / p_.split.parts;
  // Everything the step's micro-batches changed goes back to how it was before the step: gradients, buffers,
  // RNG states. What the failed attempt held was released with the exception; the cached blocks go too.
  clear_gradients(p_.params);
  undo_.restore();
  obs::release_cached_memory(p_.options.device);
  p_.split.parts *= 2;
  ++p_.split.recoveries;
  const std::int64_t smaller = (batch_size + p_.split.parts - 1) / p_.split.parts;
  p_.message(fmt::format("optimizer step {} ran out of memory {} with micro-batches of {} samples: each loaded batch now runs "
                         "as {} micro-batches of {} samples ({} per optimizer step), and the step runs again from its first sample "
                         "(gradients, buffers and RNG states as before it; the effective batch and the sample order stay)",
                         number, failed_in, micro_batch, p_.split.parts, smaller, p_.split.parts * p_.options.accumulation_steps));
}

void fail_out_of_memory(const ExceptionReport& r, c10::Device device, obs::Phase last, std::int64_t step, const std::string& note) {
  const obs::MemoryStats mem = obs::memory_stats(device);
  const obs::ProcessMemory proc = obs::process_memory();
  std::string held;
  if (mem.tracked) held += fmt::format("; tensor memory on {} peaked at {:.1f} MB in this logging window", device.str(), mem.peak_bytes / 1e6);
  if (const std::int64_t limit = obs::cpu_tensor_limit(); limit > 0 && device.is_cpu()) {
    held += fmt::format(" (cpu_tensor_limit_mb {:.4g})", limit / 1e6);
  }
  if (proc.rss_bytes >= 0) held += fmt::format("; process memory (RSS) {:.1f} MB, peak {:.1f} MB", proc.rss_bytes / 1e6, proc.peak_rss_bytes / 1e6);
  if (!note.empty()) held += "; " + note;
  // After an optimizer phase the step is done: what failed is what follows it (records, evaluation, a checkpoint, which
  // closes the lap as "other").
  const std::string what =
      last == obs::Phase::kOptimizer || last == obs::Phase::kOther
          ? fmt::format("ran out of memory after optimizer step {} (in its records, an evaluation or a checkpoint's copies)", step)
          : fmt::format("optimizer step {} ran out of memory after its {} phase", step + 1, obs::phase_name(last));
  BELLOWS_FAIL(ErrorKind::kResource, fmt::format("{}: {}{}", what, r.message.empty() ? "out of memory" : r.message, held),
               r.hint.empty() ? std::string(kOutOfMemoryHint) : r.hint);
}

void rethrow_with_batch(const std::string& where, const data::Batch& batch, ErrorKind kind) {
  std::string failed;
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (report_current_exception().out_of_memory) throw;
    failed = fmt::format("{} failed on a batch of {}: {}", where, batch.shapes(), describe_libtorch_error(e));
  }
  BELLOWS_FAIL(kind, failed,
               kind == ErrorKind::kData ? "the batch does not fit the model or its task: check that every file gives the training data's "
                                          "shapes and dtypes, and model.task against the targets"
                                        : "report this with the run's config and plan.json");
}

}  // namespace bellows::train
