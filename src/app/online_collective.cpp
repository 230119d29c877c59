// The collective calls of an online trainer (see online.h), on its compute thread: the vote of all ranks that opens
// each one, a session's samples (the fewest any rank holds) and its training, save and restore. A failure that may
// leave the ranks apart marks the job broken. The program's side (pushes, metrics, predictions) is online.cpp's.
#include "bellows/app/online.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/app/data_setup.h"  // defines: make_loaders
#include "bellows/ckpt/checkpoint.h"  // defines: load_checkpoint
#include "bellows/ckpt/inspect.h"     // defines: resolve_checkpoint
#include "bellows/data/stream_buffer.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"  // defines: report_current_exception
#include "bellows/util/timer.h"             // defines: seconds_since
#include "online_parts.h"

namespace bellows::app {
namespace fs = std::filesystem;

namespace {

const char* call_name(std::int64_t call) {
  switch (call) {
    case 1: return "a training session (bellows_train, bellows_train_async)";
    case 2: return "save (bellows_save)";
    case 3: return "restore (bellows_restore)";
    default: return "nothing";
  }
}

// The current exception's message, for the record of what broke a job.
std::string current_failure() {
  const ExceptionReport r = report_current_exception();
  return r.message.empty() ? std::string("an error without a message") : r.message;
}

}  // namespace

// What the ranks said when a collective call began: per rank.
struct OnlineTrainer::Votes {
  std::vector<std::int64_t> call, number, detail, need;
  int fewest_rank() const { return static_cast<int>(std::min_element(detail.begin(), detail.end()) - detail.begin()); }
};

OnlineTrainer::Votes OnlineTrainer::vote(Call call, std::int64_t detail, std::int64_t need) {
  dist::Strategy& ranks = *parts_->strategy;
  const int w = ranks.world_size(), me = ranks.rank();
  const auto code = static_cast<std::int64_t>(call);
  BELLOWS_CHECK_RESOURCE(broken_.empty(),
                         fmt::format("{}: the job's training ranks lost each other at an earlier collective call ({})", call_name(code), broken_),
                         "predictions and metrics still work; save the simulation's own state, destroy the trainer and restart the job "
                         "from the last checkpoint");
  ++calls_;
  at::Tensor votes = at::zeros({w, 4}, at::TensorOptions().dtype(at::kLong));
  auto v = votes.accessor<std::int64_t, 2>();
  v[me][0] = code;
  v[me][1] = calls_;
  v[me][2] = detail;
  v[me][3] = need;
  if (w > 1) {
    std::vector<at::Tensor> sum{votes};  // summed in place (the strategy moves it to its backend's device and back)
    try {
      ranks.all_reduce_sum(sum, fmt::format("the vote that opens collective call {} ({})", calls_, call_name(code)));
    } catch (...) {
      broken_ = current_failure();
      throw;
    }
  }
  Votes out;
  auto all = votes.accessor<std::int64_t, 2>();
  for (int r = 0; r < w; ++r) {
    out.call.push_back(all[r][0]);
    out.number.push_back(all[r][1]);
    out.detail.push_back(all[r][2]);
    out.need.push_back(all[r][3]);
  }
  for (int r = 0; r < w; ++r) {
    BELLOWS_CHECK_USAGE(out.call[static_cast<std::size_t>(r)] == code && out.number[static_cast<std::size_t>(r)] == calls_,
                        fmt::format("rank {} made {} as its collective call {}, while this rank (rank {}) made {} as its call {}", r,
                                    call_name(out.call[static_cast<std::size_t>(r)]), out.number[static_cast<std::size_t>(r)], me,
                                    call_name(code), calls_),
                        "the trainer's collective calls (sessions, save, restore) are made by every training rank, in the same order");
  }
  return out;
}

std::shared_ptr<data::StreamBuffer> OnlineTrainer::take_samples(std::int64_t need) {
  // The buffer's samples now (data.stream.clear: they leave it), in a buffer of their own that the session's data
  // source reads (data.source: stream) while the program pushes on into the live one. A job's ranks take the fewest
  // any of them holds, the oldest first: every rank then steps as often.
  std::int64_t take = buffer_->size();
  left_ = 0;
  if (parts_->strategy->world_size() > 1) {
    const Votes v = vote(Call::kTrain, take, need);
    const int fewest = v.fewest_rank();
    need = *std::max_element(v.need.begin(), v.need.end());
    if (v.detail[static_cast<std::size_t>(fewest)] < need) throw NotReady(v.detail[static_cast<std::size_t>(fewest)], need, fewest);
    left_ = take - v.detail[static_cast<std::size_t>(fewest)];
    take = v.detail[static_cast<std::size_t>(fewest)];
  } else if (take < need) {
    throw NotReady(take, need);
  }
  const std::shared_ptr<data::TensorDataset> taken = buffer_->take(data::stream_buffer_options(parts_->config).clear, "stream buffer", take);
  data::StreamBufferOptions options;
  options.capacity = taken->size();
  options.when_full = "error";
  auto samples = std::make_shared<data::StreamBuffer>(options);
  samples->push_many(taken->tensors());
  taken_ += taken->size();
  return samples;
}

SessionResult OnlineTrainer::run_session(const std::shared_ptr<data::StreamBuffer>& samples) {
  Parts& p = *parts_;
  dist::Strategy& ranks = *p.strategy;
  const auto start = std::chrono::steady_clock::now();
  plan::Plan plan = p.plan;
  // Each rank trains on its own samples at data.batch_size (dist/: the gradients of one process with every rank's batch).
  Loaders loaders = make_loaders(p.config, plan, samples, ranks.rank(), ranks.world_size(), /*own_data=*/true);
  SessionResult r;
  r.session = sessions_ + 1;
  r.samples = loaders.splits.train->size();
  r.left = left_;
  r.ranks = ranks.world_size();
  const std::int64_t step_before = p.trainer->step();
  try {
    r.fit = p.trainer->fit(*loaders.train, loaders.val.get());
  } catch (...) {
    if (ranks.world_size() > 1) broken_ = current_failure();  // the ranks may have taken different steps: none goes on
    throw;
  }
  r.steps = p.trainer->step() - step_before;
  r.seconds = seconds_since(start);
  r.samples_per_second = r.fit.new_samples / std::max(r.fit.seconds, 1e-9);
  p.step.store(p.trainer->step());
  p.trainer->set_header({});  // the machine and plan table once, at the first session
  p.trainer->note_in_checkpoints("sessions", r.session);  // a restart counts on from here
  const std::string who = r.ranks > 1 ? fmt::format("{} ranks x {} samples (the fewest any rank held; the others keep the rest for the next session)",
                                                    r.ranks, r.samples)
                                      : fmt::format("{} samples", r.samples);
  p.trainer->message(fmt::format("online session {}: {}, {} optimizer steps (step {}), final loss {:.6g}, {:.1f} samples/s, {:.2f} s",
                                 r.session, who, r.steps, p.trainer->step(), r.fit.final_loss, r.samples_per_second, r.seconds));
  trained_ = true;
  sessions_ = r.session;
  return r;
}

fs::path OnlineTrainer::save_here() {
  dist::Strategy& ranks = *parts_->strategy;
  if (ranks.world_size() > 1) {
    const Votes v = vote(Call::kSave, parts_->trainer->step());
    for (int r = 0; r < ranks.world_size(); ++r) {
      BELLOWS_CHECK_DATA(v.detail[static_cast<std::size_t>(r)] == parts_->trainer->step(),
                         fmt::format("save: rank {} is at optimizer step {}, this rank (rank {}) at step {}", r, v.detail[static_cast<std::size_t>(r)],
                                     ranks.rank(), parts_->trainer->step()),
                         "every rank must have trained the same sessions: restore every rank from one checkpoint");
    }
  }
  BELLOWS_CHECK_USAGE(trained_, "save: the model is untrained (no training session has run and no checkpoint was restored)",
                      "train a session (bellows_train) first");
  try {
    return parts_->trainer->save_checkpoint(nullptr, "api", /*wait=*/true);
  } catch (...) {
    if (ranks.world_size() > 1) broken_ = current_failure();
    throw;
  }
}

void OnlineTrainer::restore_here(const fs::path& path, bool collective) {
  dist::Strategy& ranks = *parts_->strategy;
  const bool vote_first = collective && ranks.world_size() > 1;
  fs::path from;
  ckpt::Checkpoint cp;
  std::exception_ptr unreadable;  // a job's rank that cannot read its checkpoint still votes: the others learn of it
  try {
    from = ckpt::resolve_checkpoint(path.string());
    cp = ckpt::load_checkpoint(from, /*mmap=*/true);  // verified: a corrupt file is a kData error here
  } catch (...) {
    if (!vote_first) throw;
    unreadable = std::current_exception();
  }
  if (vote_first) {
    const Votes v = vote(Call::kRestore, unreadable ? -1 : cp.step);
    if (unreadable) std::rethrow_exception(unreadable);
    for (int r = 0; r < ranks.world_size(); ++r) {
      const std::int64_t theirs = v.detail[static_cast<std::size_t>(r)];
      BELLOWS_CHECK_DATA(theirs >= 0, fmt::format("restore: rank {} could not read its checkpoint (its own call says why); no rank restored", r),
                         "restore every rank from the same valid checkpoint");
      BELLOWS_CHECK_USAGE(theirs == cp.step,
                          fmt::format("restore: rank {} restores the checkpoint of optimizer step {}, this rank (rank {}) {} of step {}; no "
                                      "rank restored",
                                      r, theirs, ranks.rank(), from.string(), cp.step),
                          "restore every rank from the same checkpoint");
    }
  }
  try {
    parts_->trainer->restore(cp, nullptr, /*strict=*/true);
  } catch (...) {
    if (ranks.world_size() > 1) broken_ = current_failure();
    throw;
  }
  parts_->step.store(parts_->trainer->step());
  if (cp.info.contains("sessions") && cp.info["sessions"].is_number_integer()) {
    sessions_ = cp.info["sessions"].get<std::int64_t>();
    parts_->trainer->note_in_checkpoints("sessions", sessions_.load());
  }
  parts_->trainer->message(fmt::format("restored {} (step {}, {} sessions before it)", from.string(), cp.step, sessions_.load()));
  trained_ = true;
  restored_ = true;
}

}  // namespace bellows::app
