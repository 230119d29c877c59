// Checkpoint bookkeeping, kept out of the training loop: when to write (every n steps, every n minutes, on a stop
// request, at the end), the decisions every rank takes at the same step (a stop, a due time: dist::Strategy::agree),
// rank 0's writes on a background thread (one at a time; a failure stops the run at the next step), pruning to
// keep_last while protecting the best checkpoint by the task's monitored metric, and the manifest's "monitor" and
// "best" entries, also across a resume. What a checkpoint holds is the Trainer's (its snapshot).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/ckpt/checkpoint.h"       // defines: Checkpoint
#include "bellows/ckpt/sharded.h"          // defines: ShardWriters
#include "bellows/train/checkpointing.h"   // defines: CheckpointOptions

namespace bellows::dist {
class Strategy;
}

namespace bellows::train {

class CheckpointKeeper {
 public:
  // `monitor` and `lower_is_better`: the task's metric that decides the best checkpoint. `message` reaches every sink.
  CheckpointKeeper(const CheckpointOptions& options, dist::Strategy& strategy, std::string monitor, bool lower_is_better,
                   std::function<void(const std::string&)> message);
  ~CheckpointKeeper();

  bool enabled() const { return !options_.dir.empty(); }
  void start_fit();  // the every_n_minutes clock starts

  // After each optimizer step, on every rank: collects a background write that has ended (its failure, e.g. a full
  // disk, stops the run here), then agrees with the other ranks on a stop request and a due time (dist/strategy.h:
  // the step after any rank asked). `done`: the fit's planned steps are taken.
  struct Decision {
    bool stop = false;        // the run stops after this step
    std::string checkpoint;   // write one now, for this reason ("stop", "every_n_steps", "every_n_minutes"); "" none
    bool wait = false;        // and wait until it is on disk
  };
  Decision after_step(std::int64_t step, bool stop_requested, bool done);

  // A checkpoint of optimizer step `step`: rank 0 takes `snapshot` (host copies, on this thread: what the step waits
  // for) and writes it in the background (`wait`: before returning); every rank leaves once it is complete. Returns
  // its path. kInternal error without a checkpoint directory.
  std::filesystem::path save(std::int64_t step, const std::string& reason, bool wait, const std::function<ckpt::Checkpoint()>& snapshot);
  // The same in the sharded layout (ckpt/sharded.h): every rank takes `share` (what it writes; `copy`: as host copies,
  // for a write in the background, which only one process does) and writes it; rank 0 the manifest. `writers`: this
  // rank, the world size and the ranks' sum.
  std::filesystem::path save_share(std::int64_t step, const std::string& reason, bool wait, const std::function<ckpt::Checkpoint(bool copy)>& share,
                                   const ckpt::ShardWriters& writers);
  void finish_write();  // waits for a background write; rethrows its error; its note goes to the sinks

  void observe(double monitored);  // the monitored metric at an evaluation
  std::optional<double> last_monitored() const { return last_eval_; }  // observed, or from a resumed manifest
  // The monitored and best values of a resumed checkpoint's manifest, and which checkpoint is the best.
  void restore(const nlohmann::json& info);

 private:
  std::filesystem::path write(std::int64_t step, const std::string& reason, bool wait, const std::function<ckpt::Checkpoint()>& snapshot);
  // The manifest's "reason", "monitor" and "best" entries of checkpoint `path`; returns the checkpoints pruning keeps.
  std::vector<std::filesystem::path> annotate(ckpt::Checkpoint& c, const std::string& reason, const std::filesystem::path& path);

  CheckpointOptions options_;
  dist::Strategy& strategy_;
  std::string monitor_;
  bool lower_is_better_;
  std::function<void(const std::string&)> message_;
  std::optional<double> last_eval_;  // the monitored metric at the last evaluation
  std::optional<double> best_eval_;  // the best value of it among checkpoints written
  std::filesystem::path best_checkpoint_;
  double last_checkpoint_s_ = 0;
  bool time_asked_ = false;          // every_n_minutes is due and was put to the other ranks (Strategy::agree)
  std::future<double> pending_write_;  // the background checkpoint write (its seconds)
  std::string pending_note_;
};

}  // namespace bellows::train
