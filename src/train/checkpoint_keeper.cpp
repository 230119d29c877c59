// Checkpoint bookkeeping; see checkpoint_keeper.h.
#include "bellows/train/checkpoint_keeper.h"

#include <fmt/format.h>

#include <chrono>
#include <vector>

#include "bellows/dist/strategy.h"
#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: now_s, seconds_since

namespace bellows::train {

CheckpointKeeper::CheckpointKeeper(const CheckpointOptions& options, dist::Strategy& strategy, std::string monitor, bool lower_is_better,
                                   std::function<void(const std::string&)> message)
    : options_(options), strategy_(strategy), monitor_(std::move(monitor)), lower_is_better_(lower_is_better), message_(std::move(message)) {}

CheckpointKeeper::~CheckpointKeeper() = default;

void CheckpointKeeper::start_fit() { last_checkpoint_s_ = now_s(); }

CheckpointKeeper::Decision CheckpointKeeper::after_step(std::int64_t step, bool stop_requested, bool done) {
  // A background write that has ended: a failure (disk full) stops the run at this step rather than at the next
  // checkpoint. Only a finished write is collected; the step never waits for one here.
  if (pending_write_.valid() && pending_write_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) finish_write();
  // Signals and clocks differ between ranks: one rank's stop request or due time is everyone's, at one step (with
  // several ranks the step after it was seen: dist/strategy.h). A due time is asked for once, until a checkpoint is
  // written.
  const bool due = options_.every_n_minutes > 0 && now_s() - last_checkpoint_s_ >= 60 * options_.every_n_minutes && !time_asked_;
  time_asked_ = time_asked_ || due;
  const std::vector<bool> agreed = strategy_.agree({stop_requested, due});
  Decision d;
  if (agreed[0]) {
    d.stop = true;
    if (enabled() && options_.on_stop) d.checkpoint = "stop", d.wait = true;
  } else if (enabled() && !done) {
    const bool by_steps = options_.every_n_steps > 0 && step % options_.every_n_steps == 0;
    if (by_steps || agreed[1]) d.checkpoint = by_steps ? "every_n_steps" : "every_n_minutes";
  }
  return d;
}

std::filesystem::path CheckpointKeeper::save(std::int64_t step, const std::string& reason, bool wait,
                                             const std::function<ckpt::Checkpoint()>& snapshot) {
  BELLOWS_CHECK(enabled(), "save_checkpoint() without a checkpoint directory", "set CheckpointOptions::dir");
  // Replicas are equal: rank 0 writes. With other ranks it waits for the files itself, and the barrier lets no rank
  // go on, or exit, before the checkpoint is complete.
  std::filesystem::path path = options_.dir / ckpt::checkpoint_name(step);
  if (strategy_.is_main()) path = write(step, reason, wait || strategy_.world_size() > 1, snapshot);
  strategy_.barrier();
  last_checkpoint_s_ = now_s();  // on every rank: the next time-based checkpoint counts from here
  time_asked_ = false;
  return path;
}

std::filesystem::path CheckpointKeeper::write(std::int64_t step, const std::string& reason, bool wait,
                                              const std::function<ckpt::Checkpoint()>& snapshot) {
  finish_write();  // one write at a time; a failed one raises here
  const double start_s = now_s();
  // --- on the training thread: the host copy of everything (the only part the step waits for) ---
  ckpt::Checkpoint c = snapshot();
  const std::filesystem::path path = options_.dir / ckpt::checkpoint_name(step);
  const std::vector<std::filesystem::path> keep = annotate(c, reason, path);
  const double copy_ms = 1e3 * (now_s() - start_s);
  // --- on a background thread: the files, fsyncs, rename, pruning ---
  pending_write_ = std::async(std::launch::async, [c = std::move(c), dir = options_.dir, keep_last = options_.keep_last, keep] {
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::save_checkpoint(dir, c);
    ckpt::prune_checkpoints(dir, keep_last, keep);
    return seconds_since(t0);
  });
  pending_note_ = fmt::format("checkpoint {} ({}, step {}): the step waited {:.1f} ms for the host copy", path.string(), reason, step, copy_ms);
  if (wait) finish_write();
  return path;
}

std::filesystem::path CheckpointKeeper::save_share(std::int64_t step, const std::string& reason, bool wait,
                                                   const std::function<ckpt::Checkpoint(bool copy)>& share, const ckpt::ShardWriters& writers) {
  BELLOWS_CHECK(enabled(), "save_checkpoint() without a checkpoint directory", "set CheckpointOptions::dir");
  finish_write();  // one write at a time; a failed one raises here
  const double start_s = now_s();
  // Several ranks write together, waited for (their collectives cannot run beside the training's); one process can
  // write in the background from host copies, as the whole layout does.
  const bool background = !wait && writers.world_size == 1;
  ckpt::Checkpoint c = share(background);
  const std::filesystem::path path = options_.dir / ckpt::checkpoint_name(step);
  const std::vector<std::filesystem::path> keep = annotate(c, reason, path);
  const double copy_ms = 1e3 * (now_s() - start_s);
  const bool main = writers.rank == 0;
  auto write = [c = std::move(c), dir = options_.dir, keep_last = options_.keep_last, keep, writers, main] {
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::save_sharded_checkpoint(dir, c, writers);
    if (main) ckpt::prune_checkpoints(dir, keep_last, keep);
    return seconds_since(t0);
  };
  last_checkpoint_s_ = now_s();  // on every rank: the next time-based checkpoint counts from here
  time_asked_ = false;
  if (background) {
    pending_write_ = std::async(std::launch::async, std::move(write));
    pending_note_ = fmt::format("checkpoint {} ({}, step {}, sharded): the step waited {:.1f} ms for the host copy", path.string(), reason, step, copy_ms);
    if (wait) finish_write();
    return path;
  }
  const double write_s = write();
  if (main) message_(fmt::format("checkpoint {} ({}, step {}): {} rank(s) wrote their shards in {:.1f} ms", path.string(), reason, step,
                                 writers.world_size, 1e3 * (write_s + copy_ms)));
  return path;
}

std::vector<std::filesystem::path> CheckpointKeeper::annotate(ckpt::Checkpoint& c, const std::string& reason, const std::filesystem::path& path) {
  c.info["reason"] = reason;
  // The best checkpoint by the monitored metric survives pruning; the manifest names it, so a resumed run keeps
  // protecting it (and compares later evaluations with its value, not with the last one).
  if (last_eval_ && (!best_eval_ || (lower_is_better_ ? *last_eval_ < *best_eval_ : *last_eval_ > *best_eval_))) {
    best_eval_ = last_eval_;
    best_checkpoint_ = path;
  }
  // "monitor": the metric at the last evaluation before this checkpoint; "best": the best so far and where it is.
  if (last_eval_) c.info["monitor"] = {{"name", monitor_}, {"value", *last_eval_}};
  if (best_eval_) {
    c.info["best"] = {{"name", monitor_}, {"value", *best_eval_}, {"lower_is_better", lower_is_better_}};
    if (!best_checkpoint_.empty()) c.info["best"]["checkpoint"] = best_checkpoint_.filename().string();
  }
  std::vector<std::filesystem::path> keep;
  if (options_.keep_best && !best_checkpoint_.empty()) keep.push_back(best_checkpoint_);
  return keep;
}

void CheckpointKeeper::finish_write() {
  if (!pending_write_.valid()) return;
  const double write_s = pending_write_.get();  // rethrows the writer's error (disk full, ...)
  message_(fmt::format("{}; written in the background in {:.1f} ms", pending_note_, 1e3 * write_s));
}

void CheckpointKeeper::observe(double monitored) { last_eval_ = monitored; }

void CheckpointKeeper::restore(const nlohmann::json& info) {
  if (info.contains("monitor")) last_eval_ = best_eval_ = info["monitor"]["value"].get<double>();
  if (const auto best = info.find("best"); best != info.end() && best->is_object()) {
    if (best->contains("value") && (*best)["value"].is_number()) best_eval_ = (*best)["value"].get<double>();
    // The best checkpoint keeps its protection from pruning when this run writes into the same directory.
    if (const std::string name = best->value("checkpoint", std::string()); !name.empty()) best_checkpoint_ = options_.dir / name;
  }
}

}  // namespace bellows::train
