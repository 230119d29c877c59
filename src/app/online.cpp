// Online training inside a running program; see online.h. The program's side: the compute thread, pushes, metrics,
// predictions, and the calls that hand work to the compute thread; the collective calls themselves (the vote,
// sessions, save, restore) are online_collective.cpp's.
#include "bellows/app/online.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "bellows/app/data_setup.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/data/build.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/dist/environment.h"
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
#include "online_parts.h"
#include "run_assembly.h"

namespace bellows::app {
namespace fs = std::filesystem;

SessionRunning::SessionRunning(const std::string& call)
    : Error(ErrorKind::kUsage, fmt::format("{}: a training session is running on the background thread", call),
            "wait for it (bellows_wait) or poll until it is done (bellows_poll) first; pushes may go on meanwhile") {}

NotReady::NotReady(std::int64_t buffered, std::int64_t needed, int rank)
    : Error(ErrorKind::kUsage,
            rank < 0 ? fmt::format("the stream buffer holds {} samples, the session needs {}", buffered, needed)
                     : fmt::format("rank {}'s stream buffer holds {} samples, the fewest of the job's ranks, and the session needs {} on "
                                   "every rank: no rank trained",
                                   rank, buffered, needed),
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

OnlineTrainer::OnlineTrainer(const config::Config& c, const dist::ProcessInfo* job)
    : parts_(std::make_unique<Parts>()), compute_(plan_threads(c)) {
  // The one exception to LibTorch work on the compute thread: the profiler that counts FLOPs is initialised here, on
  // the program's thread (obs/profile.h says why; it starts no OpenMP team).
  if (run_settings(c).log_flops) obs::FlopCounter::initialise_on_this_thread();
  compute_.submit<void>([&] { construct(c, job); }).get();  // LibTorch work on the compute thread only (see ComputeThread)
}

void OnlineTrainer::construct(const config::Config& c, const dist::ProcessInfo* job) {
  Parts& p = *parts_;
  p.config = c;
  const std::string source = data::data_options(c).source;
  BELLOWS_CHECK_CONFIG(source == "stream",
                       fmt::format("online training reads data.source: stream, the config has data.source: {} ({})", source,
                                   c.origin("data.source").str()),
                       "set data.source: stream; the program pushes the samples");
  // The run assembled as `bellows train` assembles one (run_assembly.h), as sessions over pushed samples.
  const RunSettings run = run_settings(c);
  RunOptions o;
  const std::string& console = run.online_console;
  o.console = console == "none" ? nullptr : console == "stderr" ? stderr : stdout;
  o.sinks = {p.latest};
  o.stop_flag = &stop_;
  o.job = job;
  o.console_sessions_only = run.online_log == "sessions";
  buffer_ = std::make_shared<data::StreamBuffer>(data::stream_buffer_options(c));
  AssembledRun a = assemble_online(c, o);
  p.plan = std::move(a.plan);
  p.model = std::move(a.model);
  p.trainer = std::move(a.trainer);
  p.strategy = std::move(a.strategy);
  run_dir_ = a.run_dir;
  if (a.resume_from) {
    restore_here(*a.resume_from, /*collective=*/false);  // every rank resumes as it is created
  } else if (run.resume == "auto") {
    started_fresh_ = true;  // the C API's status says so (BELLOWS_STARTED_FRESH), besides the log's line
  }
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

namespace {

// The first finite-check failure of a block: which tensor, which sample, which value.
struct NonFinite {
  std::string tensor;
  std::int64_t sample = -1;
  std::int64_t index = -1;  // within the sample
  double value = 0;
};

// Which samples of a block hold NaN or Inf (floating-point tensors; stored as float32). A plain loop, not a LibTorch
// op: pushes run on the program's threads (see as_stored).
std::vector<bool> nonfinite_samples(const std::map<std::string, at::Tensor>& block, std::int64_t n, std::optional<NonFinite>& first) {
  std::vector<bool> bad(static_cast<std::size_t>(n), false);
  for (const auto& [name, t] : block) {
    if (t.scalar_type() != at::kFloat || !t.is_contiguous() || t.dim() < 1 || t.size(0) != n) continue;
    const float* v = t.const_data_ptr<float>();
    const std::int64_t row = n > 0 ? t.numel() / n : 0;
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < row; ++j) {
        if (std::isfinite(v[i * row + j])) continue;
        if (!bad[static_cast<std::size_t>(i)] && (!first || i < first->sample)) first = NonFinite{name, i, j, v[i * row + j]};
        bad[static_cast<std::size_t>(i)] = true;
        break;
      }
    }
  }
  return bad;
}

// The rows of a block where `keep` is true, copied row by row (no LibTorch op: the program's thread).
std::map<std::string, at::Tensor> keep_rows(const std::map<std::string, at::Tensor>& block, const std::vector<bool>& keep) {
  const std::int64_t kept = std::count(keep.begin(), keep.end(), true);
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : block) {
    std::vector<std::int64_t> shape = t.sizes().vec();
    shape[0] = kept;
    at::Tensor to = at::empty(shape, t.options());
    const std::size_t row = t.size(0) > 0 ? t.nbytes() / static_cast<std::size_t>(t.size(0)) : 0;
    const auto* from = static_cast<const char*>(t.const_data_ptr());
    auto* dst = static_cast<char*>(to.mutable_data_ptr());
    for (std::size_t i = 0, k = 0; i < keep.size(); ++i) {
      if (keep[i]) std::memcpy(dst + row * k++, from + row * i, row);
    }
    out.emplace(name, to);
  }
  return out;
}

}  // namespace

// data.stream.check_finite: drops the block's samples that hold NaN or Inf (counted) and says which were dropped.
std::optional<OnlineTrainer::Rejected> OnlineTrainer::drop_nonfinite(std::map<std::string, at::Tensor>& block) {
  if (block.empty() || block.begin()->second.dim() < 1 || !data::stream_buffer_options(parts_->config).check_finite) return std::nullopt;
  const std::int64_t n = block.begin()->second.size(0);
  for (const auto& [name, t] : block) {  // blocks of unequal lengths are the buffer's error to name (StreamBuffer::push_many)
    if (t.dim() < 1 || t.size(0) != n) return std::nullopt;
  }
  std::optional<NonFinite> first;
  const std::vector<bool> bad = nonfinite_samples(block, n, first);
  if (!first) return std::nullopt;
  std::vector<bool> keep(bad.size());
  for (std::size_t i = 0; i < bad.size(); ++i) keep[i] = !bad[i];
  const std::int64_t refused = std::count(bad.begin(), bad.end(), true);
  block = refused < n ? keep_rows(block, keep) : std::map<std::string, at::Tensor>{};
  rejected_ += refused;
  return Rejected{first->tensor, first->sample, first->index, first->value, refused, n};
}

// The first samples fix the buffer's layout: checked against the model's keys before anything is stored. A block
// whose two dimensions are swapped (a Fortran array with the sample index first) is named as such.
void OnlineTrainer::check_first_push(const std::map<std::string, at::Tensor>& stored) {
  const auto first_samples = [](const std::map<std::string, at::Tensor>& block, bool transposed) {
    std::map<std::string, at::Tensor> probe;
    for (const auto& [name, t] : block) probe.emplace(name, (transposed && t.dim() == 2 ? t.t() : t).slice(0, 0, 1));
    data::TensorDatasetOptions options;
    options.name = "the first pushed samples";
    return data::TensorDataset(probe, options);
  };
  for (const auto& [name, t] : stored) {
    BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) >= 1,
                       fmt::format("pushed block '{}' has shape {}: expected a leading sample dimension of at least 1", name, shape_of(t)),
                       "push samples [n, ...] with n >= 1");
  }
  try {
    check_data_against_model(parts_->config, first_samples(stored, false));
  } catch (const Error& e) {
    bool swapped = std::any_of(stored.begin(), stored.end(), [](const auto& kv) { return kv.second.dim() == 2; });
    if (swapped) {
      try {
        check_data_against_model(parts_->config, first_samples(stored, true));
      } catch (const Error&) {
        swapped = false;
      }
    }
    if (!swapped) throw;
    std::string shapes;
    for (const auto& [name, t] : stored) {
      shapes += fmt::format("{}'{}' {} ({} samples of {})", shapes.empty() ? "" : ", ", name, shape_of(t), t.size(0),
                            t.dim() == 2 ? fmt::format("{} values", t.size(1)) : shape_of(t.slice(0, 0, 1).squeeze(0)));
    }
    throw Error(ErrorKind::kData,
                fmt::format("the first pushed block looks transposed: {}; with its two dimensions swapped it fits the model ({})", shapes,
                            e.message()),
                "put the sample index first in C (x[n][features]) and last in Fortran (x(features, n)): a Fortran array a(n, k) "
                "is the C block [k, n]");
  }
}

void OnlineTrainer::push_many(const std::map<std::string, at::Tensor>& samples) {
  BELLOWS_CHECK_DATA(!samples.empty(), "a push without tensors", "push the sample's tensors (x, y, ...)");
  std::map<std::string, at::Tensor> stored = as_stored(samples);
  const std::optional<Rejected> rejected = drop_nonfinite(stored);
  if (!stored.empty()) {
    std::unique_lock lock(first_push_mutex_, std::defer_lock);
    if (!first_checked_.load()) lock.lock();
    if (!first_checked_.load()) check_first_push(stored);
    buffer_->push_many(stored);
    first_checked_.store(true);
  }
  if (rejected) {
    const double v = rejected->value;
    throw Error(ErrorKind::kData,
                fmt::format("pushed tensor '{}' has {} at sample {} of the block (value {} of the sample): {} of {} samples refused, "
                            "{} stored (data.stream.check_finite)",
                            rejected->tensor, std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", rejected->sample, rejected->index,
                            rejected->refused, rejected->of, rejected->of - rejected->refused),
                "check the fields the simulation pushed there; data.stream.check_finite: false stores such samples (a session "
                "then fails at its first non-finite loss)");
  }
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
  m.eval_loss = m.eval_metric = std::numeric_limits<double>::quiet_NaN();
  if (const auto e = parts_->latest->last_eval()) {
    for (const auto& [name, value] : e->values) {
      if (name == "loss") {
        m.eval_loss = value;
      } else if (std::isnan(m.eval_metric)) {
        m.eval_metric = value;
      }
    }
  }
  m.rejected = rejected_.load();
  m.restored = restored_.load();
  m.rank = parts_->strategy ? parts_->strategy->rank() : 0;
  m.ranks = parts_->strategy ? parts_->strategy->world_size() : 1;
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
  const data::StreamBufferOptions stream = data::stream_buffer_options(parts_->config);
  return stream.ready_samples > 0 ? stream.ready_samples : stream.capacity;
}

std::shared_ptr<data::StreamBuffer> OnlineTrainer::start_session(const std::string& call, std::int64_t min_samples) {
  check_idle(call);
  BELLOWS_CHECK_USAGE(!pending_.valid(), fmt::format("{}: the last background session has not been collected", call),
                      "call wait() (bellows_wait) for its result first");
  const std::int64_t need = needed(min_samples);
  if (busy_.exchange(true)) throw SessionRunning(call);
  try {
    // Taken now, before this call returns: the session trains on what is buffered at this call (a job's ranks vote on
    // the compute thread first).
    return compute_.submit<std::shared_ptr<data::StreamBuffer>>([this, need] { return take_samples(need); }).get();
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
  if (!pending_.valid()) return {};  // nothing to wait for: a step loop may wait unconditionally
  return pending_.get();  // the session's error, rethrown here; the future is then empty
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

void OnlineTrainer::restore(const fs::path& path) {
  check_idle("restore");
  compute_.submit<void>([&] { restore_here(path, /*collective=*/true); }).get();
}

}  // namespace bellows::app
