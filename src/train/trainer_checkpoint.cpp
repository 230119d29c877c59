// The trainer's checkpoints: what a checkpoint of now holds (a whole one from rank 0, or each rank's share of a
// sharded one), its write and record, and the way back (restore). The training loop is trainer.cpp's.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_map>

#include "bellows/train/checkpoint_keeper.h"
#include "bellows/train/checkpointing.h"
#include "bellows/train/recorder.h"
#include "bellows/train/trainer.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/module_tensors.h"  // defines: named_state
#include "bellows/util/timer.h"           // defines: now_s

namespace bellows::train {
namespace {

// The trainer state of `saved` for rank `rank`: every entry but the per-rank ones of a sharded checkpoint
// ("rank.<r>.rng.cpu", "rank.<r>.data...": RNG states and data position), of which it takes its own rank's, or rank 0's
// where the checkpoint was written by fewer ranks, without the prefix. The rest as saved: the optimizer and the EMA
// copy what they load (the tensors may be a mapped file's); the few other tensors are copied here.
StateDict own_state(const StateDict& saved, int rank) {
  const std::string mine = fmt::format("rank.{}.", rank);
  const bool has_mine = std::any_of(saved.begin(), saved.end(), [&](const auto& kv) { return kv.first.rfind(mine, 0) == 0; });
  const std::string take = has_mine ? mine : "rank.0.";
  StateDict out;
  for (const auto& [key, t] : saved) {
    const bool copied = key.rfind("optim.", 0) == 0 || key.rfind("ema.", 0) == 0;
    if (key.rfind("rank.", 0) != 0) out.emplace(key, copied ? t : t.clone());
    else if (key.rfind(take, 0) == 0) out.emplace(key.substr(take.size()), t.clone());
  }
  return out;
}

}  // namespace

std::filesystem::path Trainer::save_checkpoint(data::BatchSource* train, const std::string& reason, bool wait) {
  dist::Strategy& strategy = *options_.strategy;
  const bool sharded = options_.checkpoint.layout == CheckpointOptions::Layout::kSharded;
  // What the checkpoint costs in memory: held before it and its own peak (the clock's lap banks the window's peak).
  const obs::MemoryStats before = obs::memory_stats(options_.device);
  recorder_->lap_between_steps();
  const double start_s = now_s();
  std::filesystem::path path;
  mid_step_ = true;  // a failed write leaves nothing to save again
  try {
    if (sharded) {
      // Every rank writes what it holds (share()), in parallel: nothing is gathered.
      const ckpt::ShardWriters writers{strategy.rank(), strategy.world_size(), [&](std::int64_t x) {
                                         std::vector<at::Tensor> one{at::full({1}, x, at::TensorOptions().dtype(at::kLong).device(options_.device))};
                                         strategy.all_reduce_sum(one, "a sharded checkpoint's progress");
                                         return one.front().item<std::int64_t>();
                                       }};
      path = keeper_->save_share(step_, reason, wait, [&](bool copy) { return share(train, copy); }, writers);
    } else {
      // Rank 0 writes everything: what the ranks hold in shares (optimizer state; under fsdp weights and EMA) is gathered
      // to it first (collectives every rank enters at the same step).
      const auto whole = strategy.whole_parameters();
      const StateDict optimizer_state = strategy.gather_state(optimizer_->state_dict());
      std::optional<StateDict> ema_state;
      if (ema_share_) ema_state = strategy.gather_state(ema_->state_dict());
      path = keeper_->save(step_, reason, wait, [&] { return snapshot(train, &optimizer_state, ema_state ? &*ema_state : nullptr); });
    }
  } catch (...) {
    const ExceptionReport r = report_current_exception();
    if (!r.out_of_memory) throw;
    // Which checkpoint, and what the other layout would cost (still an out-of-memory error: fit() adds what was held).
    BELLOWS_FAIL(ErrorKind::kResource,
                 fmt::format("{} (writing the {} checkpoint of optimizer step {}{})", r.message, sharded ? "sharded" : "whole", step_,
                             sharded ? "" : ": its rank gathers every rank's share and copies it"),
                 sharded ? r.hint
                         : "checkpoint.layout: sharded has every rank write its own share, with no gather (docs/distributed.md); or "
                           "raise the memory limit");
  }
  mid_step_ = false;
  saved_step_ = step_;
  const std::int64_t peak = obs::memory_stats(options_.device).peak_bytes;
  recorder_->lap_between_steps();
  record_checkpoint({step_, path.string(), reason, sharded ? "sharded" : "whole", now_s() - start_s, {}}, before, peak);
  return path;
}

void Trainer::record_checkpoint(obs::CheckpointRecord record, const obs::MemoryStats& before, std::int64_t peak) {
  dist::Strategy& strategy = *options_.strategy;
  // --- the record: every rank's three numbers (one collective) ---
  if (before.tracked) {
    const int world = strategy.world_size(), rank = strategy.rank();
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(options_.device);
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) {
      const bool mine = r == rank;
      for (const std::int64_t bytes : {before.current_bytes, peak, recorder_->training_peak()}) {
        parts.push_back(at::scalar_tensor(mine ? static_cast<double>(bytes) : 0.0, f64));
      }
    }
    const std::vector<double> all = sums_over_ranks(strategy, parts);
    for (int r = 0; r < world; ++r) {
      const std::string suffix = r == 0 ? "" : fmt::format("_rank{}", r);
      const std::size_t at = static_cast<std::size_t>(3 * r);
      record.values.emplace_back("mem_held_mb" + suffix, all[at] / 1e6);
      record.values.emplace_back("mem_peak_mb" + suffix, all[at + 1] / 1e6);
      if (all[at + 2] >= 0) record.values.emplace_back("train_peak_mb" + suffix, all[at + 2] / 1e6);
    }
  }
  recorder_->checkpoint(record);
}

void Trainer::finish_checkpoint_write() { keeper_->finish_write(); }

ckpt::Checkpoint Trainer::snapshot(data::BatchSource* train, const StateDict* optimizer_state, const StateDict* ema_state) const {
  ckpt::Checkpoint c;
  c.step = step_;
  c.epoch = epoch_;
  // to_host copies: the background writer reads them while training goes on.
  c.model = to_host(model_tensors(*model_));
  StateDict state = state_dict();
  // The whole sharded optimizer state (zero1, zero2, fsdp) and average (fsdp) in place of this rank's share.
  for (const auto& [prefix, whole] : {std::pair{"optim", optimizer_state}, std::pair{"ema", ema_state}}) {
    if (whole == nullptr) continue;
    const std::string dotted = std::string(prefix) + ".";
    std::erase_if(state, [&](const auto& kv) { return kv.first.rfind(dotted, 0) == 0; });
    merge_prefixed(state, prefix, *whole);
  }
  // Sessions never resume a data position (each starts at its data's beginning): none is stored.
  if (train != nullptr && !options_.sessions) merge_prefixed(state, "data", train->state_dict());
  merge_prefixed(state, "rng", rng_state());
  c.state = to_host(state);
  c.info = checkpoint_info();
  return c;
}

nlohmann::json Trainer::checkpoint_info() const {
  nlohmann::json info = options_.checkpoint_info;
  info["precision"] = options_.precision;
  if (const std::optional<double> loss = recorder_->last_loss()) info["train_loss"] = *loss;  // the summary of a resumed finished run
  if (options_.sessions) info["online"] = true;
  return info;
}

ckpt::Checkpoint Trainer::share(data::BatchSource* train, bool copy) const {
  const int rank = options_.strategy->rank();
  // Who writes what: each trainable parameter's owner (dist::Strategy::owners) its weight, its optimizer entries and its
  // average; rank 0 the buffers, the frozen weights and the scalars; every rank its own RNG states and data position.
  std::unordered_map<const c10::TensorImpl*, int> owner;
  for (std::size_t i = 0; i < params_.size(); ++i) owner.emplace(params_[i].unsafeGetTensorImpl(), owners_[i]);
  std::unordered_map<std::string, int> writer;  // by the model's tensor names
  for (const auto& [name, t] : bellows::named_state(*model_)) {
    const auto it = owner.find(t.unsafeGetTensorImpl());
    writer.emplace(name, it == owner.end() ? 0 : it->second);
  }
  const auto writer_of_entry = [&](const std::string& key) {
    // "optim.exp_avg.<name>", "ema.weights.<name>": the parameter's; the rest ("optim.lr", "counters.step", ...) rank 0's.
    for (const std::string prefix : {"optim.", "ema."}) {
      if (key.rfind(prefix, 0) != 0) continue;
      const auto dot = key.find('.', prefix.size());
      const auto it = dot == std::string::npos ? writer.end() : writer.find(key.substr(dot + 1));
      if (it != writer.end()) return it->second;
    }
    return 0;
  };
  ckpt::Checkpoint c;
  c.step = step_;
  c.epoch = epoch_;
  for (const auto& [name, t] : model_tensors(*model_)) {
    if (writer.at(name) == rank) c.model.emplace(name, t);
  }
  StateDict state;
  for (auto& [key, t] : state_dict()) {
    if (writer_of_entry(key) == rank) state.emplace(key, t);
  }
  const std::string own = fmt::format("rank.{}.", rank);
  if (train != nullptr && !options_.sessions) merge_prefixed(state, own + "data", train->state_dict());
  merge_prefixed(state, own + "rng", rng_state());
  // A write in the background reads host copies while training goes on; a waited-for one reads the tensors themselves.
  c.model = to_host(c.model, copy);
  c.state = to_host(state, copy);
  c.info = checkpoint_info();
  return c;
}

std::vector<std::string> Trainer::restore(const ckpt::Checkpoint& c, data::BatchSource* train, bool strict) {
  const auto whole = options_.strategy->whole_parameters();
  std::vector<std::string> differences = load_model_tensors(*model_, c.model, strict);
  if (!differences.empty()) {
    // A partial load (strict: false, e.g. a wider head): the optimizer state and data position belong to
    // another model, so training starts fresh from the loaded weights.
    message(fmt::format("loaded the matching weights of the checkpoint; {} tensors differ: {}; optimizer, schedule and data "
                        "position start fresh", differences.size(), fmt::join(differences, "; ")));
    return differences;
  }
  StateDict state = own_state(c.state, options_.strategy->rank());
  const std::string saved_precision = c.info.value("precision", options_.precision);
  if (saved_precision != options_.precision) {
    // Another precision policy: its loss-scaler state does not apply; this run's policy starts fresh.
    message(fmt::format("warning: the checkpoint was written under precision {}, this run uses {}; the {} policy starts "
                        "fresh (loss scale and counters), everything else resumes", saved_precision, options_.precision, options_.precision));
    std::erase_if(state, [](const auto& kv) { return kv.first.rfind("precision.", 0) == 0; });
    merge_prefixed(state, "precision", precision_->state_dict());
  }
  load_state_dict(state);
  const bool online = c.info.value("online", false);
  if (online || options_.sessions) {
    // No data position to continue: a session's data was a stream buffer's contents. Training goes on from the
    // checkpoint's step over this run's data from its beginning, planning its epochs from there.
    epoch_ = batches_in_epoch_ = 0;
    first_step_ = step_;
    if (online && !options_.sessions) {
      message(fmt::format("the checkpoint comes from online training (sessions over a stream buffer): weights, optimizer, schedule, "
                          "EMA and the step count ({}) continue; this run's data starts at its beginning, and train.epochs and "
                          "train.max_steps count from step {}", step_, step_));
    }
  } else {
    BELLOWS_CHECK(train != nullptr, "restore() of a run's checkpoint without its data source", "pass the training loader");
    train->load_state_dict(sub_dict(state, "data"));
  }
  load_rng_state(sub_dict(state, "rng"));
  keeper_->restore(c.info);
  saved_step_ = step_;
  if (c.info.contains("train_loss") && c.info["train_loss"].is_number()) recorder_->set_resumed_loss(c.info["train_loss"].get<double>());
  return differences;
}

}  // namespace bellows::train
