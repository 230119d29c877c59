// Online training inside a running program; see online.h.
#include "bellows/app/online.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "bellows/app/data_setup.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/dist/registry.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/dropout.h"
#include "bellows/obs/console_sink.h"
#include "bellows/obs/jsonl_sink.h"
#include "bellows/obs/profile.h"
#include "bellows/obs/tensorboard_sink.h"
#include "bellows/train/step_graph.h"
#include "bellows/train/trainer.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"
#include "bellows/util/timer.h"
#include "run_assembly.h"

namespace bellows::app {
namespace fs = std::filesystem;

SessionRunning::SessionRunning(const std::string& call)
    : Error(ErrorKind::kUsage, fmt::format("{}: a training session is running on the background thread", call),
            "wait for it (bellows_wait) or poll until it is done (bellows_poll) first; pushes may go on meanwhile") {}

NotReady::NotReady(std::int64_t buffered, std::int64_t needed)
    : Error(ErrorKind::kUsage, fmt::format("the stream buffer holds {} samples, the session needs {}", buffered, needed),
            "push more samples first, or ask for fewer (min_samples; data.stream.ready_samples)") {}

namespace {

// Floating-point values are trained in float32: a float64 push (Fortran's double precision) is stored so. The
// conversion of float64 is a plain loop on purpose: pushes run on the program's threads, and a LibTorch copy of
// a large block would open an OpenMP team there, whose idle threads then spin against the compute thread's
// (see ComputeThread).
std::map<std::string, at::Tensor> as_stored(const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : tensors) {
    BELLOWS_CHECK_DATA(t.defined(), fmt::format("pushed tensor '{}' is undefined", name), "push a tensor with values");
    if (t.scalar_type() == at::kDouble && t.is_contiguous() && t.device().is_cpu()) {
      at::Tensor f = at::empty(t.sizes(), at::TensorOptions().dtype(at::kFloat));
      const double* from = t.const_data_ptr<double>();
      float* to = f.mutable_data_ptr<float>();
      for (std::int64_t i = 0, n = t.numel(); i < n; ++i) to[i] = static_cast<float>(from[i]);
      out.emplace(name, f);
    } else {
      out.emplace(name, at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat ? t.to(at::kFloat) : t);
    }
  }
  return out;
}

// The plan's thread count, for the compute thread (made before the constructor's body plans the rest).
int plan_threads(const config::Config& c) { return plan::resolve(plan_request(c), hw::HardwareInfo::get()).threads; }

}  // namespace

// The last step record, for metrics() from any thread.
class OnlineLatestRecord final : public obs::Sink {
 public:
  void on_step(const obs::StepRecord& r) override {
    std::lock_guard lock(mutex_);
    last_ = r;
  }
  std::optional<obs::StepRecord> last() const {
    std::lock_guard lock(mutex_);
    return last_;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<obs::StepRecord> last_;
};

struct OnlineTrainer::Parts {
  config::Config config;
  plan::Plan plan;
  models::BuiltModel model;
  std::unique_ptr<train::Trainer> trainer;
  std::shared_ptr<OnlineLatestRecord> latest = std::make_shared<OnlineLatestRecord>();
  std::atomic<std::int64_t> step{0};  // the trainer's step when no session runs (the record's while one does)
};

OnlineTrainer::OnlineTrainer(const config::Config& c) : parts_(std::make_unique<Parts>()), compute_(plan_threads(c)) {
  // The one exception to LibTorch work on the compute thread: the profiler that counts FLOPs is initialised here, on
  // the program's thread (obs/profile.h says why; it starts no OpenMP team).
  if (config::get_bool(c, "log.flops")) obs::FlopCounter::initialise_on_this_thread();
  compute_.submit<void>([&] { construct(c); }).get();  // LibTorch work on the compute thread only (see ComputeThread)
}

void OnlineTrainer::construct(const config::Config& c) {
  Parts& p = *parts_;
  p.config = c;
  BELLOWS_CHECK_CONFIG(config::get_string(c, "data.source") == "stream",
                       fmt::format("online training reads data.source: stream, the config has data.source: {} ({})",
                                   config::get_string(c, "data.source"), c.origin("data.source").str()),
                       "set data.source: stream; the program pushes the samples");
  // The run assembled as `bellows train` assembles one (run_assembly.h), as sessions over pushed samples.
  RunOptions o;
  const std::string console = config::get_string(c, "online.console");
  o.console = console == "none" ? nullptr : console == "stderr" ? stderr : stdout;
  o.sinks = {p.latest};
  o.stop_flag = &stop_;
  buffer_ = std::make_shared<data::StreamBuffer>(data::stream_buffer_options(c));
  AssembledRun a = assemble_online(c, o);
  p.plan = std::move(a.plan);
  p.model = std::move(a.model);
  p.trainer = std::move(a.trainer);
  run_dir_ = a.run_dir;
  if (a.resume_from) restore_here(*a.resume_from);
}

// The thread that does all of the trainer's LibTorch work: building, sessions, predictions, checkpoints.
// LibTorch's CPU parallelism is OpenMP's (libgomp), whose thread team belongs to the thread that opens a parallel
// region. With two teams alive (work on the program's thread and on a background thread) libgomp has more
// threads than cores and stops spinning between parallel regions: every region then wakes its threads through
// the kernel. Measured with a session per std::async thread on the 2-core machine (2 threads, the icon-coupled
// model): sessions on the program's thread trained 57k samples/s, background ones 30k. With every LibTorch call
// on this one thread, and none on the program's threads (pushes copy row by row and convert by hand), there is
// one team, and background sessions train as fast as synchronous ones. The plan's thread count is set here
// (OpenMP's is per thread), and the program's own OpenMP setting is left alone.
OnlineTrainer::ComputeThread::ComputeThread(int threads) {
  thread_ = std::thread([this, threads] {
    at::set_num_threads(threads);  // OpenMP's thread count is per thread too
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || job_.valid(); });
        if (!job_.valid()) return;  // stopping, nothing left
        job = std::move(job_);
      }
      job();
    }
  });
}

OnlineTrainer::ComputeThread::~ComputeThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void OnlineTrainer::ComputeThread::post(std::packaged_task<void()> job) {
  {
    std::lock_guard lock(mutex_);
    BELLOWS_CHECK(!job_.valid(), "a second job for the online trainer's compute thread", "report this bug");
    job_ = std::move(job);
  }
  cv_.notify_one();
}

OnlineTrainer::~OnlineTrainer() {
  if (pending_.valid()) {
    stop_.store(true);
    try {
      pending_.get();
    } catch (...) {  // the program is leaving: a session's error has nobody to go to
    }
  }
}

void OnlineTrainer::check_idle(const std::string& call) const {
  if (busy_.load()) throw SessionRunning(call);
}

void OnlineTrainer::push(const std::map<std::string, at::Tensor>& sample) {
  std::map<std::string, at::Tensor> block;
  for (const auto& [name, t] : as_stored(sample)) block.emplace(name, t.unsqueeze(0));
  push_many(block);
}

void OnlineTrainer::push_many(const std::map<std::string, at::Tensor>& samples) {
  std::map<std::string, at::Tensor> stored = as_stored(samples);
  if (!first_checked_.load()) {
    // The first samples fix the buffer's layout: checked against the model's keys before anything is stored.
    std::lock_guard lock(first_push_mutex_);
    if (!first_checked_.load()) {
      std::map<std::string, at::Tensor> probe;
      for (const auto& [name, t] : stored) {
        BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) >= 1,
                           fmt::format("pushed block '{}' has shape {}: expected a leading sample dimension of at least 1", name,
                                       shape_of(t)),
                           "push samples [n, ...] with n >= 1");
        probe.emplace(name, t.slice(0, 0, 1));
      }
      data::TensorDatasetOptions options;
      options.name = "the first pushed samples";
      check_data_against_model(parts_->config, data::TensorDataset(probe, options));
      buffer_->push_many(stored);
      first_checked_.store(true);
      return;
    }
  }
  buffer_->push_many(stored);
}

std::int64_t OnlineTrainer::buffered() const { return buffer_->size(); }

OnlineMetrics OnlineTrainer::metrics() const {
  OnlineMetrics m;
  m.loss = std::numeric_limits<double>::quiet_NaN();
  m.step = parts_->step.load();
  if (const auto r = parts_->latest->last()) {
    m.step = std::max(m.step, r->step);
    m.lr = r->lr;
    m.samples_per_second = r->samples_per_s;
    for (const auto& [name, value] : r->values) {
      if (name == "loss") m.loss = value;
    }
  }
  m.training = busy_.load();
  m.sessions = sessions_.load();
  m.buffered = buffer_->size();
  m.pushed = buffer_->pushed();
  m.dropped = buffer_->dropped();
  m.taken = taken_.load();
  return m;
}

std::int64_t OnlineTrainer::needed(std::int64_t min_samples) const {
  if (min_samples > 0) return min_samples;
  const std::int64_t ready = config::get_int(parts_->config, "data.stream.ready_samples");
  return ready > 0 ? ready : config::get_int(parts_->config, "data.stream.capacity");
}

std::shared_ptr<data::StreamBuffer> OnlineTrainer::start_session(const std::string& call, std::int64_t min_samples) {
  check_idle(call);
  BELLOWS_CHECK_USAGE(!pending_.valid(), fmt::format("{}: the last background session has not been collected", call),
                      "call wait() (bellows_wait) for its result first");
  const std::int64_t need = needed(min_samples);
  if (busy_.exchange(true)) throw SessionRunning(call);
  try {
    if (buffer_->size() < need) throw NotReady(buffer_->size(), need);
    // Taken now, before this call returns: the session trains on what is buffered at this call.
    return compute_.submit<std::shared_ptr<data::StreamBuffer>>([this] { return take_samples(); }).get();
  } catch (...) {
    busy_.store(false);
    throw;
  }
}

std::future<SessionResult> OnlineTrainer::submit_session(std::shared_ptr<data::StreamBuffer> samples) {
  return compute_.submit<SessionResult>([this, samples = std::move(samples)] {
    try {
      SessionResult r = run_session(samples);
      busy_.store(false);
      return r;
    } catch (...) {
      busy_.store(false);
      throw;
    }
  });
}

SessionResult OnlineTrainer::train(std::int64_t min_samples) { return submit_session(start_session("train", min_samples)).get(); }

void OnlineTrainer::train_async(std::int64_t min_samples) { pending_ = submit_session(start_session("train_async", min_samples)); }

bool OnlineTrainer::poll() const { return busy_.load(); }

SessionResult OnlineTrainer::wait() {
  BELLOWS_CHECK_USAGE(pending_.valid(), "wait: no background session was started (or its result was collected)",
                      "start one with train_async (bellows_train_async)");
  return pending_.get();  // the session's error, rethrown here; the future is then empty
}

std::shared_ptr<data::StreamBuffer> OnlineTrainer::take_samples() {
  // The buffer's samples now (data.stream.clear: it empties), in a buffer of their own that the session's
  // data source reads (data.source: stream) while the program pushes on into the live one.
  const std::shared_ptr<data::TensorDataset> taken = buffer_->take(config::get_bool(parts_->config, "data.stream.clear"));
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
  const auto start = std::chrono::steady_clock::now();
  plan::Plan plan = p.plan;
  Loaders loaders = make_loaders(p.config, plan, samples);
  SessionResult r;
  r.session = sessions_ + 1;
  r.samples = loaders.splits.train->size();
  const std::int64_t step_before = p.trainer->step();
  r.fit = p.trainer->fit(*loaders.train, loaders.val.get());
  r.steps = p.trainer->step() - step_before;
  r.seconds = seconds_since(start);
  r.samples_per_second = r.fit.new_samples / std::max(r.fit.seconds, 1e-9);
  p.step.store(p.trainer->step());
  p.trainer->set_header({});  // the machine and plan table once, at the first session
  p.trainer->message(fmt::format("online session {}: {} samples, {} optimizer steps (step {}), final loss {:.6g}, {:.1f} samples/s, {:.2f} s",
                                 r.session, r.samples, r.steps, p.trainer->step(), r.fit.final_loss, r.samples_per_second, r.seconds));
  trained_ = true;
  sessions_ = r.session;
  return r;
}

at::Tensor OnlineTrainer::predict(const at::Tensor& input, const PredictOptions& options, std::optional<bool> ema) {
  check_idle("predict");
  return compute_.submit<at::Tensor>([&] { return predict_here(input, options, ema); }).get();
}

at::Tensor OnlineTrainer::predict_here(const at::Tensor& input, const PredictOptions& options, std::optional<bool> ema) {
  Parts& p = *parts_;
  BELLOWS_CHECK_USAGE(trained_, "predict: the model is untrained (no training session has run and no checkpoint was restored)",
                      "train a session (bellows_train) or restore a checkpoint (bellows_restore) first");
  BELLOWS_CHECK_DATA(input.defined() && input.dim() == 2 && input.size(0) >= 1,
                     fmt::format("predict: the input has shape {}, expected [rows, features] with rows >= 1",
                                 input.defined() ? shape_of(input) : std::string("(none)")),
                     "give one input row per prediction");
  check_prediction_input(p.config, input, "predict: the input");
  train::Ema* averaged = p.trainer->ema();
  BELLOWS_CHECK_USAGE(!(ema.value_or(false) && averaged == nullptr), "predict: EMA weights asked for, but the run has no EMA",
                      "set ema.enabled: true, or predict with the trained weights");
  const bool use_ema = averaged != nullptr && ema.value_or(true);
  torch::nn::Module& model = *p.model.module;

  // Eval mode, EMA weights swapped in; both undone however this ends.
  struct Restore {
    torch::nn::Module& model;
    train::Ema* ema;
    ~Restore() {
      if (ema) ema->swap();
      model.train();
    }
  } restore{model, use_ema ? averaged : nullptr};
  if (use_ema) averaged->swap();
  model.eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = at::isFloatingType(input.scalar_type()) ? input.to(at::kFloat) : input;
  constexpr std::int64_t kRows = 1024;  // rows per batch: bounds the memory of many-sample predictions
  std::vector<at::Tensor> outputs;
  PredictOptions o = options;
  for (std::int64_t first = 0; first < x.size(0); first += kRows) {
    data::Batch batch;
    batch.size = std::min(kRows, x.size(0) - first);
    batch.tensors["x"] = x.slice(0, first, first + batch.size).to(p.plan.device);
    o.first_index = options.first_index + first;
    outputs.push_back(predict_batch(*p.model.task, model, batch, o, "the prediction input").to(at::kCPU));
  }
  return at::cat(outputs, 0).to(at::kFloat).contiguous();
}

fs::path OnlineTrainer::save() {
  check_idle("save");
  return compute_.submit<fs::path>([this] { return save_here(); }).get();
}

fs::path OnlineTrainer::save_here() {
  BELLOWS_CHECK_USAGE(trained_, "save: the model is untrained (no training session has run and no checkpoint was restored)",
                      "train a session (bellows_train) first");
  const fs::path path = parts_->trainer->save_checkpoint(nullptr, "api", /*wait=*/true);
  return path;
}

void OnlineTrainer::restore(const fs::path& path) {
  check_idle("restore");
  compute_.submit<void>([&] { restore_here(path); }).get();
}

void OnlineTrainer::restore_here(const fs::path& path) {
  const fs::path from = ckpt::resolve_checkpoint(path.string());
  const ckpt::Checkpoint cp = ckpt::load_checkpoint(from);  // verified: a corrupt file is a kData error here
  parts_->trainer->restore(cp, nullptr, /*strict=*/true);
  parts_->step.store(parts_->trainer->step());
  parts_->trainer->message(fmt::format("restored {} (step {})", from.string(), cp.step));
  trained_ = true;
}

}  // namespace bellows::app
