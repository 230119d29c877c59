// The training loop. Trainer::fit_steps is the story of a run, top to bottom: plan the fit, then per optimizer step
// run it (a StepRunner: forward and backward over the micro-batches, the update skipped on the device on non-finite
// gradients), schedule, EMA, meters, records, evaluation, checkpoints, stopping; then the summary. How a step runs is
// train/step_runner.h's, what is reported train/recorder.h's, when checkpoints are written train/checkpoint_keeper.h's.
#include "bellows/train/trainer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable, select_blocks
#include "bellows/obs/memory.h"
#include "bellows/train/anomaly.h"
#include "bellows/train/checkpoint_keeper.h"
#include "bellows/train/checkpointing.h"
#include "bellows/train/eager_step.h"  // defines: to_device
#include "bellows/train/freeze.h"
#include "bellows/train/recorder.h"
#include "bellows/train/recovering_step.h"  // defines: fail_out_of_memory
#include "bellows/train/step_undo.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/module_tensors.h"  // defines: named_parameters, named_state
#include "bellows/util/timer.h"           // defines: now_s

namespace bellows::train {
namespace {

bool uses_total_steps(const std::string& type) { return type == "cosine" || type == "linear"; }

// The names of the optimizer's parameters, in its order: the record names the first non-finite gradient by them.
std::vector<std::string> parameter_names(const torch::nn::Module& model, const std::vector<at::Tensor>& params) {
  std::unordered_map<const void*, std::string> by_tensor;
  for (const auto& [name, p] : bellows::named_parameters(model)) by_tensor.emplace(p.unsafeGetTensorImpl(), name);
  std::vector<std::string> names;
  for (const auto& p : params) {
    const auto it = by_tensor.find(p.unsafeGetTensorImpl());
    names.push_back(it != by_tensor.end() ? it->second : fmt::format("parameter {}", names.size()));
  }
  return names;
}

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

// The model's named blocks as a strategy sees them (dist::ModelBlocks): fsdp chooses its units among them.
dist::ModelBlocks model_blocks(torch::nn::Module& model) {
  dist::ModelBlocks blocks;
  blocks.model_name = model.name();
  auto* blocked = dynamic_cast<models::Checkpointable*>(&model);
  if (blocked == nullptr) return blocks;
  blocks.names = blocked->checkpoint_blocks();
  blocks.parameters = [&model](const std::string& name) {
    for (const auto& item : model.named_modules()) {
      if (item.key() == name) return item.value()->parameters();
    }
    BELLOWS_FAIL(ErrorKind::kInternal, fmt::format("the model names a block {} that is none of its modules", name), "report this bug");
  };
  blocks.set_hooks = [blocked](std::shared_ptr<BlockHooks> hooks) { blocked->set_block_hooks(std::move(hooks)); };
  return blocks;
}

}  // namespace

const std::vector<std::string>& on_nonfinite_names() {
  static const std::vector<std::string> names{"auto", "stop", "skip"};
  return names;
}

const std::vector<std::string>& compile_names() {
  static const std::vector<std::string> names{"off", "cuda_graph", "auto"};
  return names;
}

Trainer::Trainer(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Task> task, TrainerOptions options)
    : model_(std::move(model)), task_(std::move(task)), options_(std::move(options)) {
  BELLOWS_CHECK_CONFIG(model_ != nullptr && task_ != nullptr, "the trainer needs a model and a task", "pass both");
  BELLOWS_CHECK_CONFIG(options_.epochs >= 1 || (options_.epochs == 0 && options_.max_steps > 0),
                       fmt::format("epochs is {}, expected >= 1 (0 only with a max_steps limit)", options_.epochs), "set train.epochs");
  BELLOWS_CHECK_CONFIG(options_.accumulation_steps >= 1,
                       fmt::format("accumulation_steps is {}, expected >= 1", options_.accumulation_steps),
                       "set train.accumulation_steps to 1 (no accumulation) or more");
  BELLOWS_CHECK_CONFIG(options_.clip_max_norm >= 0 && options_.clip_value >= 0,
                       fmt::format("clip_max_norm={} clip_value={}, expected >= 0", options_.clip_max_norm, options_.clip_value),
                       "use 0 to disable clipping");
  BELLOWS_CHECK_CONFIG(options_.log_every_n_steps >= 1, "log_every_n_steps must be >= 1", "set train.log_every_n_steps");
  BELLOWS_CHECK_CONFIG(!options_.eval_with_ema || options_.ema.has_value(), "eval_with_ema is set but EMA is off",
                       "enable ema or unset eval_with_ema");
  precision_ = precision::make_precision(options_.precision, options_.device, options_.scaler);
  const bool scaled = precision_->scales_loss();  // its loss scaler skips overflowing steps by design
  BELLOWS_CHECK_CONFIG(!(scaled && options_.on_nonfinite == OnNonfinite::kStop),
                       fmt::format("train.on_nonfinite: stop conflicts with precision {}, whose loss scaler skips the steps that "
                                   "overflow and lowers its scale by design (the first steps often do)", options_.precision),
                       fmt::format("use train.on_nonfinite: auto (or skip) with {}, or precision bf16-mixed to stop at non-finite gradients",
                                   options_.precision));
  stop_on_nonfinite_ = options_.on_nonfinite == OnNonfinite::kStop || (options_.on_nonfinite == OnNonfinite::kAuto && !scaled);

  if (!options_.strategy) options_.strategy = std::make_shared<dist::SingleDevice>();
  model_->to(options_.device);
  if (options_.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  if (!options_.freeze.empty()) frozen_ = freeze(bellows::named_parameters(*model_), options_.freeze);
  precision_->configure_backends();
  // What trains, in the optimizer's order; a sharded strategy (zero1) gives this rank's optimizer only its share.
  const NamedParameters trainable = trainable_parameters(bellows::named_parameters(*model_), options_.optimizer);
  for (const auto& [name, p] : trainable) params_.push_back(p);
  dist::Strategy& strategy = *options_.strategy;
  strategy.attach(model_blocks(*model_), params_);  // fsdp: its units among the model's blocks, its hooks on them
  const std::vector<bool> mine = strategy.shard(params_);
  NamedParameters owned;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    if (mine[i]) owned.push_back(trainable[i]);
  }
  optimizer_ = std::make_unique<Optimizer>(owned, options_.optimizer);
  owners_ = strategy.owners(params_);
  if (options_.ema) {
    // Each rank averages the weights it holds between steps (fsdp: its own of the blocks, and everything outside them);
    // a whole checkpoint gathers the rest from their owners (save_checkpoint).
    const std::vector<bool> held = strategy.held_between_steps(params_);
    std::unordered_set<const c10::TensorImpl*> elsewhere;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!held[i]) elsewhere.insert(params_[i].unsafeGetTensorImpl());
    }
    ema_share_ = !elsewhere.empty();
    BELLOWS_CHECK_CONFIG(!(ema_share_ && options_.eval_with_ema),
                         fmt::format("dist.strategy {} with ema.eval: each rank keeps the average of its own share of the blocks' "
                                     "weights, so no rank has the whole average to evaluate",
                                     strategy.name()),
                         "evaluate the live weights (ema.eval: false; checkpoints keep the whole average), or use dist.strategy: zero2");
    NamedTensors averaged = bellows::named_state(*model_);
    std::erase_if(averaged, [&](const auto& named) { return elsewhere.contains(named.second.unsafeGetTensorImpl()); });
    ema_ = std::make_unique<Ema>(averaged, *options_.ema);
  }
  recorder_ = std::make_unique<Recorder>(options_, *precision_);
  recorder_->set_memory_categories([this] { return held_by_category(); });
  keeper_ = std::make_unique<CheckpointKeeper>(options_.checkpoint, *options_.strategy, task_->monitor(), task_->lower_is_better(),
                                               [this](const std::string& text) { message(text); });
  if (options_.sessions) {
    // Sessions have no planned end: a schedule that decays over the run's steps must be told how many.
    BELLOWS_CHECK_CONFIG(!uses_total_steps(options_.schedule.type) || options_.schedule.total_steps > 0,
                         fmt::format("schedule.type is {}, which decays over schedule.total_steps, but online training has no "
                                     "planned end and schedule.total_steps is 0", options_.schedule.type),
                         "set schedule.total_steps (sessions x optimizer steps per session), or use schedule.type constant");
    schedule_ = build_schedule(0);
  }
}

Trainer::~Trainer() = default;

std::array<std::int64_t, 4> Trainer::held_by_category() const {
  std::unordered_set<const void*> seen;
  const auto held = [&](const at::Tensor& t) -> std::int64_t {
    if (!t.defined() || !t.has_storage() || !seen.insert(t.storage().unsafeGetStorageImpl()).second) return 0;
    return static_cast<std::int64_t>(t.storage().nbytes());
  };
  std::array<std::int64_t, 4> bytes{};
  for (const auto& t : model_->parameters()) bytes[0] += held(t);
  for (const auto& t : model_->buffers()) bytes[0] += held(t);
  for (const auto& p : params_) bytes[1] += held(p.grad());
  // The buckets a data-parallel strategy keeps between steps (the gradients, cleared after each step, are their views).
  bytes[1] += options_.strategy->gradient_buffer_bytes();
  bytes[2] = optimizer_->state_bytes();
  if (ema_) {
    for (const auto& [name, t] : ema_->averaged()) bytes[3] += held(t);
  }
  return bytes;
}

void Trainer::add_sink(std::shared_ptr<obs::Sink> sink) { recorder_->add_sink(std::move(sink)); }
void Trainer::set_header(std::vector<std::pair<std::string, std::string>> header) { recorder_->set_header(std::move(header)); }
void Trainer::set_run_info(std::string name, std::string dir) { recorder_->set_run_info(std::move(name), std::move(dir)); }
void Trainer::message(const std::string& text) { recorder_->message(text); }
double Trainer::flops_per_sample() const { return recorder_->flops_per_sample(); }

std::unique_ptr<Schedule> Trainer::build_schedule(std::int64_t planned) {
  ScheduleOptions schedule_options = options_.schedule;
  if (schedule_options.mode == "auto") schedule_options.mode = task_->lower_is_better() ? "min" : "max";
  if (uses_total_steps(schedule_options.type) && schedule_options.total_steps == 0) {
    schedule_options.total_steps = planned;
    if (planned <= schedule_options.warmup_steps) {  // a short run (max_steps) inside the warmup
      schedule_options.total_steps = schedule_options.warmup_steps + 1;
      message(fmt::format("note: the run's {} optimizer steps end inside the {} warmup steps; the {} decay will not be reached",
                          planned, schedule_options.warmup_steps, schedule_options.type));
    }
  }
  return make_schedule(schedule_options, options_.optimizer.lr);
}

void Trainer::set_micro_split(std::int64_t parts) {
  BELLOWS_CHECK_CONFIG(parts >= 1, fmt::format("micro-batches per loaded batch: {}, expected >= 1", parts), "pass 1 or more");
  split_.parts = parts;
}

StepParts Trainer::step_parts() {
  return StepParts{*model_, *task_, *precision_, *optimizer_, *options_.strategy, options_, params_, recorder_->clock(), split_,
                   [this](const std::string& text) { message(text); }, ema_.get(), plan_revision_};
}

FitResult Trainer::fit(data::BatchSource& train, data::BatchSource* val) {
  split_.note.clear();
  try {
    return fit_steps(train, val);
  } catch (...) {
    // Out of memory (an allocation of the CPU's counting allocator, a full GPU, a failed host allocation): a resource
    // error (exit code 4) that says where in the step it happened and what the memory held.
    std::exception_ptr error = std::current_exception();
    if (const ExceptionReport r = report_current_exception(); r.out_of_memory) {
      try {
        fail_out_of_memory(r, options_.device, recorder_->last_phase(), step_, split_.note);
      } catch (...) {
        error = std::current_exception();
      }
    }
    fail_after_saving(train, error);
  }
}

void Trainer::fail_after_saving(data::BatchSource& train, std::exception_ptr error) {
  const bool saveable = !mid_step_ && keeper_->enabled() && !options_.sessions && step_ > saved_step_ && step_ > 0 &&
                        options_.strategy->world_size() == 1;  // several ranks would have to meet to save
  if (!saveable) std::rethrow_exception(error);
  std::filesystem::path saved;
  try {
    saved = save_checkpoint(&train, "error", /*wait=*/true);
  } catch (...) {  // the checkpoint could not be written either (a full disk): the first error is the one to report
    std::rethrow_exception(error);
  }
  const ExceptionReport r = report_exception(error);
  BELLOWS_FAIL(r.kind,
               fmt::format("{}; optimizer step {}, complete before the error, was saved first: {} (resume=auto continues from it)",
                           r.message, step_, saved.string()),
               r.hint);
}

FitResult Trainer::fit_steps(data::BatchSource& train, data::BatchSource* val) {
  // --- the fit's plan: its batches and steps (a session starts at its data's beginning, counting on from its step) ---
  const std::int64_t k = options_.accumulation_steps;
  const std::int64_t batches_per_epoch = train.batches_per_epoch();
  BELLOWS_CHECK_DATA(batches_per_epoch > 0, "the training data produced no batches",
                     "check the data source: fewer samples than one batch with drop_last?");
  if (options_.sessions) epoch_ = batches_in_epoch_ = 0, first_step_ = step_;
  const std::int64_t steps_per_epoch = (batches_per_epoch + k - 1) / k;
  // epochs 0: train to max_steps, over as many epochs as that takes (as Lightning's max_steps without max_epochs).
  const std::int64_t epochs = options_.epochs > 0 ? options_.epochs : (options_.max_steps + steps_per_epoch - 1) / steps_per_epoch;
  std::int64_t planned = first_step_ + steps_per_epoch * epochs;
  if (options_.max_steps > 0) planned = std::min(planned, first_step_ + options_.max_steps);

  // --- set-up: records, the schedule (sessions: built once), replicas, how steps run ---
  recorder_->start_fit(epochs, batches_per_epoch, planned, step_, parameter_names(*model_, params_));
  keeper_->start_fit();
  if (!options_.sessions) schedule_ = build_schedule(planned);
  if (!pending_schedule_state_.empty()) {
    schedule_->load_state_dict(pending_schedule_state_);
    pending_schedule_state_.clear();
  }
  dist::Strategy& strategy = *options_.strategy;
  strategy.setup(*model_, params_);  // replicas equal (rank 0's weights), gradient communication attached
  const std::int64_t world = strategy.world_size();
  const std::unique_ptr<StepRunner> runner = make_step_runner(step_parts(), step_);
  FitResult result;
  const std::int64_t samples_at_start = samples_, skipped_at_start = precision_->skipped_steps(), recoveries_at_start = split_.recoveries;
  model_->train();

  bool done = step_ >= planned;
  result.already_complete = done && !options_.sessions;
  if (result.already_complete) result.last_eval = keeper_->last_monitored();
  for (; epoch_ < epochs && !done; ++epoch_) {
    train.start_epoch(epoch_);
    recorder_->start_epoch(step_);
    while (!done) {
      const std::int64_t batches = std::min(k, train.remaining_in_epoch());
      if (batches == 0) break;

      // --- one optimizer step: forward and backward over its micro-batches, then the update, skipped on the device on
      // non-finite gradients (the host learns of it at the next record); nothing here waits for the device ---
      recorder_->begin_step(step_);
      strategy.sync_buffers(*model_);  // rank 0's running statistics on every rank (nothing with one process)
      optimizer_->set_lr(schedule_->lr(step_));
      mid_step_ = true;
      StepBatches loaded(train, batches, step_ + 1, recorder_->clock());
      const StepResult ran = runner->run(loaded);
      ++step_;
      if (ema_ && !ran.ema_updated) ema_->update(step_, ran.gradients.skipped);
      mid_step_ = false;
      if (options_.detect_anomaly) {
        const auto whole = strategy.whole_parameters();
        check_parameters(*model_, step_, optimizer_->lr());
      }
      samples_ += ran.samples * world;  // every rank takes an equal share (the sampler pads to it)
      batches_in_epoch_ += batches;
      recorder_->end_step(ran, step_, world);

      // --- records, evaluation, checkpoints, stopping ---
      if (step_ % options_.log_every_n_steps == 0 && train.remaining_in_epoch() > 0) record(batches_per_epoch);
      if (val && options_.eval_every_n_steps > 0 && step_ % options_.eval_every_n_steps == 0) run_eval(*val, result);
      done = step_ >= planned;
      const CheckpointKeeper::Decision decision = keeper_->after_step(step_, stop_requested(), done);
      if (decision.stop) result.interrupted = done = true;
      if (!decision.checkpoint.empty()) result.checkpoint = save_checkpoint(&train, decision.checkpoint, decision.wait);
    }
    record(batches_per_epoch);
    if (train.remaining_in_epoch() > 0) break;  // stopped mid-epoch: by max_steps or a stop request
    recorder_->end_epoch(epoch_);
    if (val && options_.eval_every_n_steps == 0) run_eval(*val, result);
    batches_in_epoch_ = 0;
    ++result.epochs_completed;
  }

  // --- the end: a trace still recording, the last checkpoint (a sharded one from the shares the ranks hold), every
  // weight back on every rank (fsdp), the summary ---
  recorder_->end_profile();
  // A resumed run that was complete has its last step on disk already: nothing new to write.
  if (!result.interrupted && keeper_->enabled() && options_.checkpoint.at_end && !(result.already_complete && step_ == saved_step_)) {
    result.checkpoint = save_checkpoint(&train, "end", /*wait=*/true);
  }
  strategy.gather_parameters();
  keeper_->finish_write();
  result.steps = step_;
  result.epochs_in_all = epoch_;
  result.skipped_steps = precision_->skipped_steps() - skipped_at_start;
  result.samples = samples_;
  result.new_samples = samples_ - samples_at_start;
  result.oom_recoveries = split_.recoveries - recoveries_at_start;
  result.micro_split = split_.parts;
  recorder_->end_fit(result, epochs, task_->monitor(), split_.parts);
  return result;
}

void Trainer::record(std::int64_t batches_per_epoch) {
  const std::string skipped = recorder_->record({step_, epoch_, batches_in_epoch_, batches_per_epoch, optimizer_->lr()});
  // After the record reached the sinks (metrics.jsonl has the window): on_nonfinite stop ends the run here.
  BELLOWS_CHECK_DATA(skipped.empty() || !stop_on_nonfinite_,
                     fmt::format("non-finite gradients: {}; the step was skipped, so the weights are those before it "
                                 "(train.on_nonfinite: {}; noticed at the record of step {})",
                                 skipped, on_nonfinite_names()[static_cast<std::size_t>(options_.on_nonfinite)], step_),
                     "lower optim.lr or clip gradients (train.clip_max_norm); check the data (train.detect_anomaly=true names the "
                     "first non-finite tensor); or set train.on_nonfinite: skip to train on past such steps");
}

void Trainer::run_eval(data::BatchSource& val, FitResult& result) {
  const auto values = evaluate(val);
  recorder_->eval({step_, epoch_, options_.eval_with_ema, values});
  for (const auto& [name, value] : values) {
    if (name == task_->monitor()) {
      result.last_eval = value;
      keeper_->observe(value);
      schedule_->observe_metric(value);
    }
  }
}

std::vector<std::pair<std::string, double>> Trainer::evaluate(data::BatchSource& val) {
  options_.strategy->sync_buffers(*model_);  // every rank evaluates the model rank 0 saves
  // Ranks may evaluate different numbers of batches: no block-by-block gathers, the whole model (fsdp).
  const auto whole = options_.strategy->whole_parameters();
  torch::NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  if (options_.eval_with_ema) ema_->swap();
  val.start_epoch(0);
  // Sample-weighted sums kept on the device (float64): read once, after the last batch.
  at::Tensor loss_sum;
  std::vector<std::pair<std::string, at::Tensor>> metric_sums;
  double weight = 0;
  auto add = [](at::Tensor& sum, const at::Tensor& value, double w) {
    const at::Tensor weighted = value.detach().to(at::kDouble) * w;
    if (sum.defined()) sum.add_(weighted);
    else sum = weighted.clone();
  };
  while (auto batch = val.next()) {
    const data::Batch b = to_device(*batch, options_);
    StepOutput out;
    {
      auto guard = precision_->autocast();
      try {
        out = task_->eval_step(*model_, b);
      } catch (...) {
        rethrow_with_batch(fmt::format("the evaluation after optimizer step {}", step_), b, ErrorKind::kData);
      }
    }
    const double w = static_cast<double>(b.size);
    add(loss_sum, out.loss, w);
    if (metric_sums.empty()) {
      for (const auto& [name, v] : out.metrics) metric_sums.emplace_back(name, at::Tensor());
    }
    for (std::size_t i = 0; i < metric_sums.size() && i < out.metrics.size(); ++i) add(metric_sums[i].second, out.metrics[i].second, w);
    weight += w;
  }
  if (options_.eval_with_ema) ema_->swap();
  if (was_training) model_->train();
  // Every rank evaluated its own share: the sums and the weight are added up over ranks (one collective).
  const auto on_device = at::TensorOptions().dtype(at::kDouble).device(options_.device);
  std::vector<at::Tensor> parts{at::scalar_tensor(weight, on_device), loss_sum.defined() ? loss_sum : at::zeros({}, on_device)};
  for (const auto& [name, sum] : metric_sums) parts.push_back(sum.defined() ? sum : at::zeros({}, on_device));
  const std::vector<double> total = sums_over_ranks(*options_.strategy, parts);
  BELLOWS_CHECK_DATA(total[0] > 0, "the validation data produced no batches", "check the validation split and batch size");
  std::vector<std::pair<std::string, double>> values = {{"loss", total[1] / total[0]}};
  for (std::size_t i = 0; i < metric_sums.size(); ++i) values.emplace_back(metric_sums[i].first, total[i + 2] / total[0]);
  return values;
}

std::optional<std::int64_t> Trainer::measure_step_memory(const data::Batch& batch) {
  if (!obs::memory_stats(options_.device).tracked) return std::nullopt;
  // Everything the probe changes is put back, also when it fails (an out-of-memory trial of the batch-size finder):
  // RNG states (dropout draws), buffers (BatchNorm statistics) and gradients; the optimizer does not step.
  StepUndo undo(*model_);
  undo.save();
  const bool was_training = model_->is_training();
  const auto put_back = [&] {
    clear_gradients(params_);
    undo.restore();
    model_->train(was_training);
  };
  model_->train();
  std::int64_t peak = 0;
  try {
    const data::Batch b = to_device(batch, options_);
    obs::reset_peak(options_.device);
    const std::int64_t base = obs::memory_stats(options_.device).current_bytes;
    StepOutput out;
    {
      auto autocast = precision_->autocast();
      out = task_->step(*model_, b);
    }
    {
      auto local = options_.strategy->no_sync();  // a probe: no gradient communication
      options_.strategy->backward(precision_->scale_loss(out.loss));
    }
    peak = obs::memory_stats(options_.device).peak_bytes - base;
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
  obs::reset_peak(options_.device);
  return peak;
}

StateDict Trainer::state_dict() const {
  StateDict s;
  merge_prefixed(s, "optim", optimizer_->state_dict());
  merge_prefixed(s, "precision", precision_->state_dict());
  if (schedule_) merge_prefixed(s, "schedule", schedule_->state_dict());
  if (ema_) merge_prefixed(s, "ema", ema_->state_dict());
  put_int(s, "counters.step", step_);
  put_int(s, "counters.epoch", epoch_);
  put_int(s, "counters.batches_in_epoch", batches_in_epoch_);
  put_int(s, "counters.samples", samples_);
  put_int(s, "counters.micro_split", split_.parts);  // out-of-memory recovery's smaller micro-batches continue
  return s;
}

void Trainer::load_state_dict(const StateDict& state) {
  // The state of every parameter's optimizer (whatever strategy wrote it): a sharded optimizer takes its share.
  optimizer_->load_state_dict(optimizer_->own_entries(sub_dict(state, "optim")));
  precision_->load_state_dict(sub_dict(state, "precision"));
  pending_schedule_state_ = sub_dict(state, "schedule");  // the schedule is built when fit() knows the plan
  if (schedule_ && !pending_schedule_state_.empty()) {     // sessions: built already
    schedule_->load_state_dict(pending_schedule_state_);
    pending_schedule_state_.clear();
  }
  if (ema_) {
    StateDict ema = sub_dict(state, "ema");
    if (ema_share_) {  // this rank averages its share (the checkpoint has every rank's)
      const StateDict mine = ema_->state_dict();
      std::erase_if(ema, [&](const auto& kv) { return !mine.contains(kv.first); });
    }
    ema_->load_state_dict(ema);
  }
  step_ = get_int(state, "counters.step");
  epoch_ = get_int(state, "counters.epoch");
  batches_in_epoch_ = get_int(state, "counters.batches_in_epoch");
  samples_ = get_int(state, "counters.samples");
  // Checkpoints older than out-of-memory recovery have no split: whole batches.
  split_.parts = contains(state, "counters.micro_split") ? get_int(state, "counters.micro_split") : 1;
  BELLOWS_CHECK_DATA(split_.parts >= 1, fmt::format("the trainer state's counters.micro_split is {}, expected >= 1", split_.parts),
                     "the checkpoint's state.bin is damaged: resume from another checkpoint");
}

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
