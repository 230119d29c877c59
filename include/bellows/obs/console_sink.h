// Console output of a training run: the header table at start; on a terminal a progress bar per epoch with
// ETA, the loss and the task's metrics and samples/s redrawn in place; when not a terminal, one plain line per
// logged step with the numbers a person reads (step, loss, metrics, lr, samples/s, ms/step, grad norm, peak
// memory; every field of a record is in metrics.jsonl); the summary table at the end.
#pragma once

#include <cstdio>

#include "bellows/obs/sink.h"  // defines: Sink

namespace bellows::obs {

class ConsoleSink final : public Sink {
 public:
  // `out` is written to; `tty`: draw a progress bar (default: isatty(out)). `sessions_only` (online training's
  // default, online.log: sessions): the header of the first session and the messages (one line a session, warnings),
  // no steps, epochs, evaluations or summaries.
  explicit ConsoleSink(std::FILE* out = stdout, int tty = -1, bool sessions_only = false);

  void on_run_start(const RunStart& start) override;
  void on_step(const StepRecord& record) override;
  void on_epoch_end(std::int64_t epoch, const StepRecord& last) override;
  void on_eval(const EvalRecord& record) override;
  void on_message(const std::string& text) override;
  void on_run_end(const RunEnd& end) override;

 private:
  void finish_bar();
  std::FILE* out_;
  bool tty_;
  bool sessions_only_ = false;
  bool bar_open_ = false;
  std::int64_t epochs_ = 0;
};

// "  key   value" rows with the key column padded to the widest key.
std::string format_table(const std::vector<std::pair<std::string, std::string>>& rows, int indent = 2);

}  // namespace bellows::obs
