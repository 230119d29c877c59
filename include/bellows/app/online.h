// Online training inside a running program (seed 002: a climate simulation trains a diffusion model on the
// fields it has just produced). An OnlineTrainer lives as long as the program wants it: the program pushes
// samples into its stream buffer while it runs, and every so often asks for a training session over what the
// buffer holds, synchronously or on a background thread while it keeps pushing. Model, optimizer state,
// schedule, EMA and step count carry over from session to session; checkpoints have the directory format of
// `bellows train` (`bellows ckpt inspect` reads them, `bellows train --resume` continues them); predictions
// use the EMA weights where there are some. The C API (bellows_c.h) and the Fortran module are this class.
//
//   auto c = app::resolve_config("online.yaml", {});            // data.source: stream
//   app::OnlineTrainer t(c);
//   t.push_many({{"x", context}, {"y", fine}});                 // every simulation step; copied
//   if (t.buffered() >= 3840) t.train_async();                  // every 48 steps; the simulation goes on
//   ...
//   t.wait();                                                   // the session's result, or its error
//   at::Tensor samples = t.predict(context);                    // ddpm: fine fields for the contexts
//
// A job of several training processes (the ranks of an MPI simulation: bellows_create_mpi; or any program that
// gives each process its rank and a rendezvous: dist::ProcessInfo) trains one model data-parallel under dist.strategy.
// Pushes and predictions stay local. Sessions, saves and restores are collective: every rank makes them, in the same
// order, and each begins with a vote of all ranks (which call, its number, the samples each rank holds), so a rank that
// calls another thing is told so, and one that does not call at all makes the others fail within dist.timeout_s
// naming it. A session trains on the same number of samples on every rank, the fewest any rank holds (the oldest
// ones; the rest wait for the next session), each rank on its own samples at data.batch_size: the gradients of one
// process with all the ranks' batches. After a collective call failed (a rank lost), the trainer refuses collective
// calls; predictions and metrics still work.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "bellows/config/config.h"        // defines: Config
#include "bellows/dist/environment.h"     // defines: ProcessInfo
#include "bellows/models/task.h"          // defines: PredictOptions
#include "bellows/train/fit_result.h"     // defines: FitResult
#include "bellows/util/error.h"           // defines: Error

namespace bellows::data {
class StreamBuffer;
}
namespace bellows::train {
class Trainer;
}

namespace bellows::app {

// A call that needs the model while a background session trains (kUsage): wait() or poll() first.
class SessionRunning : public Error {
 public:
  explicit SessionRunning(const std::string& call);
};

// train() with fewer samples buffered than asked for (kUsage): nothing was trained.
class NotReady : public Error {
 public:
  // rank >= 0: a job's session; `buffered` is that rank's, the fewest of the job's ranks.
  NotReady(std::int64_t buffered, std::int64_t needed, int rank = -1);
};

struct SessionResult {
  std::int64_t session = 0;         // 1, 2, ...; 0: none (wait() without a session)
  std::int64_t samples = 0;         // samples in the session's data (this rank's: the fewest any rank held)
  std::int64_t left = 0;            // samples this rank's buffer kept for the next session (more than the fewest)
  int ranks = 1;                    // training ranks
  std::int64_t steps = 0;           // optimizer steps of the session
  double seconds = 0;               // the session's wall time (data, training, its checkpoint)
  double samples_per_second = 0;    // trained samples (epochs x samples) over the training time
  train::FitResult fit;             // the trainer's report: total steps, final loss, checkpoint
};

// The latest numbers, safe to read from any thread at any time (also while a session trains).
struct OnlineMetrics {
  std::int64_t step = 0;              // optimizer steps taken, all sessions
  std::int64_t sessions = 0;          // sessions finished
  double loss = 0;                    // the training loss of the last logging window (NaN before any)
  double eval_loss = 0;               // the last evaluation's loss (NaN before any)
  double eval_metric = 0;             // the last evaluation's first metric besides the loss (NaN: none)
  double lr = 0;
  double samples_per_second = 0;      // of the last logging window
  std::int64_t buffered = 0;          // samples in the buffer now
  std::int64_t pushed = 0;            // samples pushed in total
  std::int64_t dropped = 0;           // samples a full buffer dropped before a session took them
  std::int64_t taken = 0;             // samples taken by sessions (pushed = taken + dropped + buffered, with clear)
  std::int64_t rejected = 0;          // samples pushes refused for NaN or Inf values (data.stream.check_finite)
  bool training = false;              // a session is running
  int rank = 0;                       // this trainer's rank in its job
  int ranks = 1;                      // training ranks of the job (1: alone)
  bool restored = false;              // continues from a checkpoint (the config's resume, or restore())
};

class OnlineTrainer {
 public:
  // `config`: a validated run config (app::resolve_config) with data.source: stream; one process
  // (dist.strategy: auto or single). Plans the device, precision and threads (plan::apply: LibTorch's thread
  // pool is the process's), builds the model, writes <output_dir>/<name>/ (config.resolved.yaml, plan.json,
  // metrics.jsonl) and, with resume set, restores the checkpoint. online.console says where the log goes.
  // All LibTorch work of the trainer runs on one thread of its own (sessions, predictions, checkpoints);
  // the calling threads only push and wait.
  // `job`: this process's place among the training processes of a job the program set up (rank, world size, the
  // rendezvous: master_addr:master_port, rank 0 serving it); they meet here within dist.timeout_s and train under
  // dist.strategy (auto: the job's default, ddp). Null: the calling process trains alone (a process that a launcher
  // started as one of several says so in a warning).
  explicit OnlineTrainer(const config::Config& config, const dist::ProcessInfo* job = nullptr);
  ~OnlineTrainer();  // stops a running session at its next step and waits for it
  OnlineTrainer(const OnlineTrainer&) = delete;
  OnlineTrainer& operator=(const OnlineTrainer&) = delete;

  // --- thread-safe, also during a session ---
  // One sample (tensors without the sample dimension) or a block (a leading sample dimension). Copied.
  // Floating-point values are stored as float32. The first push fixes the names, shapes and dtypes and is
  // checked against the model's keys (model.context_features, ...); a mismatch is a kConfig/kData error
  // naming the tensor and both shapes (and the likely transposition where the block's dimensions are swapped), and
  // nothing is stored. data.stream.check_finite: samples with NaN or Inf values are refused (counted in metrics():
  // rejected), the others stored, and a kData error names the first bad tensor and sample.
  void push(const std::map<std::string, at::Tensor>& sample);
  void push_many(const std::map<std::string, at::Tensor>& samples);
  std::int64_t buffered() const;
  OnlineMetrics metrics() const;
  bool training() const { return busy_.load(); }

  // --- one caller at a time; SessionRunning while a background session trains ---
  // A session over the samples buffered now when at least `min_samples` are (0: data.stream.ready_samples,
  // or data.stream.capacity when that is 0), else NotReady. The session takes the samples (data.stream.clear:
  // the buffer empties) and trains train.epochs epochs over them (at most train.max_steps steps).
  SessionResult train(std::int64_t min_samples = 0);
  // The same on a background thread; pushes go on meanwhile. The session's samples are taken from the buffer
  // before this returns (what later pushes add waits for the next session); NotReady is thrown here.
  void train_async(std::int64_t min_samples = 0);
  // Whether a background session is still running (false: finished or none started).
  bool poll() const;
  // Waits for the background session and returns its result; rethrows its error. Without one (none started, or
  // collected already): returns at once, a result with session 0.
  SessionResult wait();

  // Predictions for `input` [rows, features] (Task::predict: the ddpm samples [rows, out] or [rows, samples,
  // out]; other models their outputs), in eval mode without gradients, on the trainer's device, returned on the
  // CPU as contiguous float32. ema: the EMA weights when the run has them (std::nullopt: when it has them; true
  // without EMA: kUsage).
  // kUsage before any session or restore (the weights are untrained).
  at::Tensor predict(const at::Tensor& input, const PredictOptions& options = {}, std::optional<bool> ema = std::nullopt);

  // A checkpoint now into <run dir>/checkpoints (waits until it is on disk); returns its path. kUsage before
  // any session or restore.
  std::filesystem::path save();
  // Weights, optimizer, schedule, EMA, counters and RNG states of a checkpoint (a step-* directory, a
  // checkpoints/ directory or a run directory: the newest valid one), strictly; the next session continues
  // from its step. A corrupt or mismatched checkpoint is a kData error and changes nothing.
  void restore(const std::filesystem::path& path);

  const std::filesystem::path& run_dir() const { return run_dir_; }
  // The config's resume was auto and found no checkpoint of the run: the trainer started untrained.
  bool started_fresh() const { return started_fresh_; }
  data::StreamBuffer& buffer() { return *buffer_; }

 private:
  struct Parts;  // config, plan, model, task, trainer, sinks
  // One thread runs every session and prediction, one job at a time (see online.cpp for why).
  class ComputeThread {
   public:
    explicit ComputeThread(int threads);
    ~ComputeThread();
    template <typename R, typename F>
    std::future<R> submit(F&& f) {
      auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
      std::future<R> result = task->get_future();
      post(std::packaged_task<void()>([task] { (*task)(); }));
      return result;
    }

   private:
    void post(std::packaged_task<void()> job);
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::packaged_task<void()> job_;
    bool stopping_ = false;
  };

  std::shared_ptr<data::StreamBuffer> start_session(const std::string& call, std::int64_t min_samples);
  std::future<SessionResult> submit_session(std::shared_ptr<data::StreamBuffer> samples);
  void construct(const config::Config& config, const dist::ProcessInfo* job);
  std::filesystem::path save_here();
  void restore_here(const std::filesystem::path& path, bool collective);
  at::Tensor predict_here(const at::Tensor& input, const PredictOptions& options, std::optional<bool> ema);
  std::shared_ptr<data::StreamBuffer> take_samples(std::int64_t need);
  SessionResult run_session(const std::shared_ptr<data::StreamBuffer>& samples);
  void check_idle(const std::string& call) const;
  std::int64_t needed(std::int64_t min_samples) const;
  enum class Call : std::int64_t { kTrain = 1, kSave = 2, kRestore = 3 };
  struct Votes;
  // The vote that opens a collective call (compute thread; nothing in one process): every rank's call, its number and
  // `detail` (a session's samples buffered and needed, a restore's step); kUsage when a rank called something else.
  Votes vote(Call call, std::int64_t detail, std::int64_t need = 0);
  struct Rejected {  // a push's samples refused for NaN or Inf: the first bad value, and how many of the block
    std::string tensor;
    std::int64_t sample = 0, index = 0;
    double value = 0;
    std::int64_t refused = 0, of = 0;
  };
  std::optional<Rejected> drop_nonfinite(std::map<std::string, at::Tensor>& block);
  void check_first_push(const std::map<std::string, at::Tensor>& stored);

  std::unique_ptr<Parts> parts_;
  ComputeThread compute_;  // after parts_: destroyed (joined) before it
  std::shared_ptr<data::StreamBuffer> buffer_;
  std::filesystem::path run_dir_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  std::future<SessionResult> pending_;
  std::mutex first_push_mutex_;
  std::atomic<bool> first_checked_{false};
  std::atomic<bool> trained_{false};  // a session ran or a checkpoint was restored
  std::atomic<std::int64_t> sessions_{0};
  std::atomic<std::int64_t> taken_{0};
  std::atomic<std::int64_t> rejected_{0};
  std::atomic<bool> restored_{false};
  bool started_fresh_ = false;
  std::int64_t calls_ = 0;        // collective calls made (compute thread)
  std::int64_t left_ = 0;         // the samples this rank's buffer kept at the last session's vote (compute thread)
  std::string broken_;            // the failure that left the job unusable ("": none; compute thread)
};

}  // namespace bellows::app
