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
#include "bellows/train/schedule_registry.h"
#include "bellows/train/step_undo.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/module_tensors.h"  // defines: named_parameters, named_state
#include "bellows/util/timer.h"           // defines: now_s

namespace bellows::train {
namespace {

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
    BELLOWS_CHECK_CONFIG(!find_schedule(options_.schedule.type).decays_over_total_steps || options_.schedule.total_steps > 0,
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
  if (find_schedule(schedule_options.type).decays_over_total_steps && schedule_options.total_steps == 0) {
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

// What a fit() plans before its first step, and the counters it reports as differences.
struct Trainer::FitPlan {
  std::int64_t accumulation = 1;       // loaded batches per optimizer step
  std::int64_t batches_per_epoch = 0;
  std::int64_t epochs = 0;
  std::int64_t planned = 0;            // the step the fit ends at
  std::int64_t samples_at_start = 0, skipped_at_start = 0, recoveries_at_start = 0;
};

FitResult Trainer::fit_steps(data::BatchSource& train, data::BatchSource* val) {
  const FitPlan plan = plan_fit(train);
  start_fit(plan);
  const std::unique_ptr<StepRunner> runner = make_step_runner(step_parts(), step_);
  FitResult result;
  model_->train();

  bool done = step_ >= plan.planned;
  result.already_complete = done && !options_.sessions;
  if (result.already_complete) result.last_eval = keeper_->last_monitored();
  for (; epoch_ < plan.epochs && !done; ++epoch_) {
    train.start_epoch(epoch_);
    recorder_->start_epoch(step_);
    while (!done) {
      const std::int64_t batches = std::min(plan.accumulation, train.remaining_in_epoch());
      if (batches == 0) break;
      run_step(*runner, train, batches);
      done = after_step(train, val, plan, result);
    }
    record(plan.batches_per_epoch);
    if (train.remaining_in_epoch() > 0) break;  // stopped mid-epoch: by max_steps or a stop request
    recorder_->end_epoch(epoch_);
    if (val && options_.eval_every_n_steps == 0) run_eval(*val, result);
    batches_in_epoch_ = 0;
    ++result.epochs_completed;
  }
  finish_fit(train, plan, result);
  return result;
}

// The fit's plan: its batches and steps (a session starts at its data's beginning, counting on from its step).
Trainer::FitPlan Trainer::plan_fit(data::BatchSource& train) {
  FitPlan plan;
  plan.accumulation = options_.accumulation_steps;
  plan.batches_per_epoch = train.batches_per_epoch();
  BELLOWS_CHECK_DATA(plan.batches_per_epoch > 0, "the training data produced no batches",
                     "check the data source: fewer samples than one batch with drop_last?");
  if (options_.sessions) epoch_ = batches_in_epoch_ = 0, first_step_ = step_;
  const std::int64_t steps_per_epoch = (plan.batches_per_epoch + plan.accumulation - 1) / plan.accumulation;
  // epochs 0: train to max_steps, over as many epochs as that takes (as Lightning's max_steps without max_epochs).
  plan.epochs = options_.epochs > 0 ? options_.epochs : (options_.max_steps + steps_per_epoch - 1) / steps_per_epoch;
  plan.planned = first_step_ + steps_per_epoch * plan.epochs;
  if (options_.max_steps > 0) plan.planned = std::min(plan.planned, first_step_ + options_.max_steps);
  plan.samples_at_start = samples_;
  plan.skipped_at_start = precision_->skipped_steps();
  plan.recoveries_at_start = split_.recoveries;
  return plan;
}

// Set-up: records, the schedule (sessions: built once), replicas equal (rank 0's weights) with their gradient
// communication attached.
void Trainer::start_fit(const FitPlan& plan) {
  recorder_->start_fit(plan.epochs, plan.batches_per_epoch, plan.planned, step_, parameter_names(*model_, params_));
  keeper_->start_fit();
  if (!options_.sessions) schedule_ = build_schedule(plan.planned);
  if (!pending_schedule_state_.empty()) {
    schedule_->load_state_dict(pending_schedule_state_);
    pending_schedule_state_.clear();
  }
  options_.strategy->setup(*model_, params_);
}

// One optimizer step: forward and backward over its micro-batches, then the update, skipped on the device on
// non-finite gradients (the host learns of it at the next record); nothing here waits for the device.
void Trainer::run_step(StepRunner& runner, data::BatchSource& train, std::int64_t batches) {
  dist::Strategy& strategy = *options_.strategy;
  recorder_->begin_step(step_);
  strategy.sync_buffers(*model_);  // rank 0's running statistics on every rank (nothing with one process)
  optimizer_->set_lr(schedule_->lr(step_));
  mid_step_ = true;
  StepBatches loaded(train, batches, step_ + 1, recorder_->clock());
  const StepResult ran = runner.run(loaded);
  ++step_;
  if (ema_ && !ran.ema_updated) ema_->update(step_, ran.gradients.skipped);
  mid_step_ = false;
  if (options_.detect_anomaly) {
    const auto whole = strategy.whole_parameters();
    check_parameters(*model_, step_, optimizer_->lr());
  }
  samples_ += ran.samples * strategy.world_size();  // every rank takes an equal share (the sampler pads to it)
  batches_in_epoch_ += batches;
  recorder_->end_step(ran, step_, strategy.world_size());
}

// After a step: records, evaluation, checkpoints, stopping. True when the fit is done.
bool Trainer::after_step(data::BatchSource& train, data::BatchSource* val, const FitPlan& plan, FitResult& result) {
  if (step_ % options_.log_every_n_steps == 0 && train.remaining_in_epoch() > 0) record(plan.batches_per_epoch);
  if (val && options_.eval_every_n_steps > 0 && step_ % options_.eval_every_n_steps == 0) run_eval(*val, result);
  bool done = step_ >= plan.planned;
  const CheckpointKeeper::Decision decision = keeper_->after_step(step_, stop_requested(), done);
  if (decision.stop) result.interrupted = done = true;
  if (!decision.checkpoint.empty()) result.checkpoint = save_checkpoint(&train, decision.checkpoint, decision.wait);
  return done;
}

// The end: a trace still recording, the last checkpoint (a sharded one from the shares the ranks hold), every weight
// back on every rank (fsdp), the summary.
void Trainer::finish_fit(data::BatchSource& train, const FitPlan& plan, FitResult& result) {
  recorder_->end_profile();
  // A resumed run that was complete has its last step on disk already: nothing new to write.
  if (!result.interrupted && keeper_->enabled() && options_.checkpoint.at_end && !(result.already_complete && step_ == saved_step_)) {
    result.checkpoint = save_checkpoint(&train, "end", /*wait=*/true);
  }
  options_.strategy->gather_parameters();
  keeper_->finish_write();
  result.steps = step_;
  result.epochs_in_all = epoch_;
  result.skipped_steps = precision_->skipped_steps() - plan.skipped_at_start;
  result.samples = samples_;
  result.new_samples = samples_ - plan.samples_at_start;
  result.oom_recoveries = split_.recoveries - plan.recoveries_at_start;
  result.micro_split = split_.parts;
  recorder_->end_fit(result, plan.epochs, task_->monitor(), split_.parts);
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

}  // namespace bellows::train
