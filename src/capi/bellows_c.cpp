// The C API (bellows_c.h) over app::OnlineTrainer. This file and the CLI are the only places where errors
// become codes: every entry point catches everything, stores the message for bellows_last_error() and
// returns a status.
#include "bellows/bellows_c.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bellows/app/online.h"
#include "bellows/dist/environment.h"
#include "bellows/app/schema.h"
#include "bellows/config/config.h"
#include "bellows/util/error.h"
#include "bellows/util/exception_report.h"
#include "bellows/version.h"
#include "bellows_c_internal.h"

struct bellows_trainer {
  std::unique_ptr<bellows::app::OnlineTrainer> trainer;
};

namespace {

using bellows::Error;
using bellows::ErrorKind;

thread_local std::string last_error;

// Live handles. A call looks its handle up here and holds a reference while it runs, so a destroy on another
// thread frees the trainer only after the calls in flight are done, and a dead handle is never dereferenced.
std::mutex handles_mutex;
std::unordered_map<const bellows_trainer*, std::shared_ptr<bellows_trainer>>& handles() {
  static auto* map = new std::unordered_map<const bellows_trainer*, std::shared_ptr<bellows_trainer>>();  // never destroyed:
  return *map;  // calls from threads that outlive static destruction still find a map
}

std::shared_ptr<bellows_trainer> find_handle(const bellows_trainer* t) {
  if (t == nullptr) throw Error(ErrorKind::kUsage, "the trainer handle is NULL", "create one with bellows_create");
  std::lock_guard lock(handles_mutex);
  const auto it = handles().find(t);
  if (it == handles().end()) {
    throw Error(ErrorKind::kUsage, fmt::format("{} is not a live bellows trainer (destroyed, or never created)", static_cast<const void*>(t)),
                "use the handle bellows_create gave, before bellows_destroy");
  }
  return it->second;
}

int status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return BELLOWS_ERR_USAGE;
    case ErrorKind::kConfig: return BELLOWS_ERR_CONFIG;
    case ErrorKind::kData: return BELLOWS_ERR_DATA;
    case ErrorKind::kResource: return BELLOWS_ERR_RESOURCE;
    case ErrorKind::kInterrupted:
    case ErrorKind::kInternal: return BELLOWS_ERR_INTERNAL;
  }
  return BELLOWS_ERR_INTERNAL;
}

int fail(int status, std::string message) {
  last_error = std::move(message);
  return status;
}

// Runs `body`, mapping whatever it throws to a status and a message.
template <typename Body>
int guarded(const char* call, Body&& body) noexcept {
  try {
    last_error.clear();
    return body();
  } catch (const bellows::app::SessionRunning& e) {
    return fail(BELLOWS_ERR_BUSY, fmt::format("{}: {} ({})", call, e.message(), e.hint()));
  } catch (const bellows::app::NotReady& e) {
    return fail(BELLOWS_NOT_READY, fmt::format("{}: {} ({})", call, e.message(), e.hint()));
  } catch (...) {
    // bellows errors by their kind; out of memory (host or device) is RESOURCE; util/exception_report.h.
    const bellows::ExceptionReport r = bellows::report_current_exception();
    if (r.message.empty()) return BELLOWS_ERR_RESOURCE;  // not even the message could be allocated
    try {
      return fail(status_of(r.kind), r.hint.empty() ? fmt::format("{}: {}", call, r.message) : fmt::format("{}: {} ({})", call, r.message, r.hint));
    } catch (...) {
      return status_of(r.kind);
    }
  }
}

at::ScalarType scalar_type(int32_t dtype, const std::string& what) {
  switch (dtype) {
    case BELLOWS_FLOAT32: return at::kFloat;
    case BELLOWS_FLOAT64: return at::kDouble;
    case BELLOWS_INT32: return at::kInt;
    case BELLOWS_INT64: return at::kLong;
    default:
      throw Error(ErrorKind::kUsage, fmt::format("{} has dtype {}, which is none of BELLOWS_FLOAT32 (0), BELLOWS_FLOAT64 (1), "
                                                 "BELLOWS_INT32 (2), BELLOWS_INT64 (3)", what, dtype),
                  "set bellows_tensor.dtype");
  }
}

std::string describe(const bellows_tensor& t, int index) {
  return t.name != nullptr ? fmt::format("tensor {} ('{}')", index, t.name) : fmt::format("tensor {}", index);
}

std::vector<std::int64_t> shape_of(const bellows_tensor& t, const std::string& what) {
  if (t.ndim < 0 || t.ndim > BELLOWS_MAX_DIMS) {
    throw Error(ErrorKind::kUsage, fmt::format("{} has ndim {}, expected 0..{}", what, t.ndim, BELLOWS_MAX_DIMS), "set bellows_tensor.ndim");
  }
  std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim);
  for (int d = 0; d < t.ndim; ++d) {
    if (shape[static_cast<std::size_t>(d)] < 0) {
      throw Error(ErrorKind::kUsage, fmt::format("{} has shape[{}] = {}, expected >= 0", what, d, shape[static_cast<std::size_t>(d)]),
                  "set bellows_tensor.shape");
    }
  }
  // The element count and the byte size must fit in 64 bits before LibTorch sees the shape (it would fail with an
  // internal "Storage size calculation overflowed"): a caller's bad shape is a usage error.
  std::int64_t n = 1;
  for (const auto s : shape) {
    if (__builtin_mul_overflow(n, s, &n)) {
      throw Error(ErrorKind::kUsage, fmt::format("{} has shape [{}]: its element count overflows 64 bits", what, fmt::join(shape, ", ")),
                  "set bellows_tensor.shape to the array's real extents");
    }
  }
  return shape;
}

// A view of the caller's memory (no copy: the trainer copies what it keeps).
at::Tensor view_of(const bellows_tensor& t, const std::string& what) {
  const at::ScalarType type = scalar_type(t.dtype, what);
  const std::vector<std::int64_t> shape = shape_of(t, what);
  std::int64_t n = 1, bytes = 0;
  for (const auto s : shape) n *= s;  // cannot overflow: shape_of checked
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(c10::elementSize(type)), &bytes)) {
    throw Error(ErrorKind::kUsage, fmt::format("{} has {} elements: its size in bytes overflows 64 bits", what, n),
                "set bellows_tensor.shape to the array's real extents");
  }
  if (n > 0 && t.data == nullptr) throw Error(ErrorKind::kUsage, fmt::format("{} has {} elements but data is NULL", what, n), "point data at the values");
  if (n == 0) return at::empty(shape, at::TensorOptions().dtype(type));
  return at::from_blob(t.data, shape, at::TensorOptions().dtype(type));
}

std::map<std::string, at::Tensor> named_views(const bellows_tensor* tensors, int32_t count) {
  if (tensors == nullptr || count < 1) {
    throw Error(ErrorKind::kUsage, fmt::format("{} tensors given (tensors {}NULL)", count, tensors == nullptr ? "" : "not "),
                "push at least one tensor (e.g. x and y)");
  }
  std::map<std::string, at::Tensor> out;
  for (int32_t i = 0; i < count; ++i) {
    const bellows_tensor& t = tensors[i];
    const std::string what = describe(t, i);
    if (t.name == nullptr || t.name[0] == '\0') throw Error(ErrorKind::kUsage, fmt::format("{} has no name", what), "name each pushed tensor (x, y)");
    if (!out.emplace(t.name, view_of(t, what)).second) {
      throw Error(ErrorKind::kUsage, fmt::format("{}: the name '{}' is given twice", what, t.name), "give each tensor its own name");
    }
  }
  return out;
}

int copy_path(const std::string& path, char* out, size_t capacity) {
  if (out == nullptr) return BELLOWS_OK;
  if (path.size() + 1 > capacity) {
    if (capacity > 0) out[0] = '\0';
    throw Error(ErrorKind::kUsage, fmt::format("the path {} needs {} bytes, path_capacity is {}", path, path.size() + 1, capacity),
                "pass a larger buffer (4096 bytes hold any path)");
  }
  std::memcpy(out, path.c_str(), path.size() + 1);
  return BELLOWS_OK;
}

// bellows_job -> the job's processes as dist/ knows them: kUsage errors name the field.
bellows::dist::ProcessInfo process_of(const bellows_job& job) {
  if (job.size < 1 || job.rank < 0 || job.rank >= job.size) {
    throw Error(ErrorKind::kUsage, fmt::format("bellows_job has rank {} of size {}: expected size >= 1 and 0 <= rank < size", job.rank, job.size),
                "give each training process its rank among them and their number");
  }
  const int local_size = job.local_size > 0 ? job.local_size : 1;
  if (job.local_rank < 0 || job.local_rank >= local_size) {
    throw Error(ErrorKind::kUsage, fmt::format("bellows_job has local_rank {} of local_size {}: expected 0 <= local_rank < local_size",
                                               job.local_rank, job.local_size),
                "give the rank among the training processes on this node (0 and 1 when there is one)");
  }
  bellows::dist::ProcessInfo p;
  p.rank = job.rank;
  p.world_size = job.size;
  p.local_rank = job.local_rank;
  p.local_world_size = local_size;
  p.launcher = "the program";
  if (job.size > 1) {
    const std::string at = job.rendezvous == nullptr ? std::string() : std::string(job.rendezvous);
    const std::size_t colon = at.rfind(':');
    int port = 0;
    try {
      port = colon == std::string::npos ? 0 : std::stoi(at.substr(colon + 1));
    } catch (const std::exception&) {
      port = 0;
    }
    if (colon == std::string::npos || colon == 0 || port < 1 || port > 65535) {
      throw Error(ErrorKind::kUsage, fmt::format("bellows_job.rendezvous is \"{}\": expected HOST:PORT with a port of 1-65535", at),
                  "give rank 0's host and a free port (bellows_create_mpi picks them for an MPI communicator)");
    }
    p.master_addr = at.substr(0, colon);
    p.master_port = port;
    p.reason = fmt::format("the program's job: rank {} of {}, rendezvous {}", job.rank, job.size, at);
  } else {
    p.reason = "the program's job of one training process";
  }
  return p;
}

int create(const bellows::config::Config& base, const char* const* overrides, int32_t n, bellows_trainer** out,
           const bellows_job* job = nullptr) {
  std::vector<std::string> args;
  if (n < 0 || (n > 0 && overrides == nullptr)) {
    throw Error(ErrorKind::kUsage, fmt::format("n_overrides is {} with overrides {}", n, overrides == nullptr ? "NULL" : "given"),
                "pass n_overrides 0, or an array of that many \"key=value\" strings");
  }
  for (int32_t i = 0; i < n; ++i) {
    if (overrides[i] == nullptr) throw Error(ErrorKind::kUsage, fmt::format("overrides[{}] is NULL", i), "pass \"key=value\" strings");
    args.emplace_back(overrides[i]);
  }
  const bellows::config::Config c = bellows::app::resolve_loaded_config(base, args);
  auto handle = std::make_shared<bellows_trainer>();
  const std::optional<bellows::dist::ProcessInfo> process = job != nullptr ? std::optional(process_of(*job)) : std::nullopt;
  handle->trainer = std::make_unique<bellows::app::OnlineTrainer>(c, process ? &*process : nullptr);
  {
    std::lock_guard lock(handles_mutex);
    handles().emplace(handle.get(), handle);
  }
  *out = handle.get();
  if (handle->trainer->started_fresh()) {
    return fail(BELLOWS_STARTED_FRESH,
                fmt::format("resume: auto found no checkpoint of the run (its name, or a newer <name>-N, in output_dir): the trainer starts "
                            "untrained in {}",
                            handle->trainer->run_dir().string()));
  }
  return BELLOWS_OK;
}

}  // namespace

extern "C" {

const char* bellows_version(void) { return BELLOWS_VERSION; }

int bellows_api_version(void) { return BELLOWS_C_API_VERSION; }

const char* bellows_last_error(void) { return last_error.c_str(); }

int bellows_create(const char* config_path, const char* const* overrides, int32_t n_overrides, bellows_trainer** out) {
  return guarded("bellows_create", [&] {
    if (out == nullptr) throw Error(ErrorKind::kUsage, "out is NULL", "pass the address of a bellows_trainer*");
    *out = nullptr;
    if (config_path == nullptr) throw Error(ErrorKind::kUsage, "config_path is NULL", "give a YAML config file");
    return create(bellows::config::Config::load(config_path), overrides, n_overrides, out);
  });
}

int bellows_create_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides, bellows_trainer** out) {
  return guarded("bellows_create_from_string", [&] {
    if (out == nullptr) throw Error(ErrorKind::kUsage, "out is NULL", "pass the address of a bellows_trainer*");
    *out = nullptr;
    if (yaml == nullptr) throw Error(ErrorKind::kUsage, "yaml is NULL", "give the config as YAML text");
    return create(bellows::config::Config::parse(yaml, "<config text>"), overrides, n_overrides, out);
  });
}

int bellows_create_job(const char* config_path, const char* const* overrides, int32_t n_overrides, const bellows_job* job,
                       bellows_trainer** out) {
  return guarded("bellows_create_job", [&] {
    if (out == nullptr) throw Error(ErrorKind::kUsage, "out is NULL", "pass the address of a bellows_trainer*");
    *out = nullptr;
    if (config_path == nullptr) throw Error(ErrorKind::kUsage, "config_path is NULL", "give a YAML config file");
    if (job == nullptr) throw Error(ErrorKind::kUsage, "job is NULL", "describe the job's processes in a bellows_job");
    return create(bellows::config::Config::load(config_path), overrides, n_overrides, out, job);
  });
}

int bellows_create_job_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides, const bellows_job* job,
                                   bellows_trainer** out) {
  return guarded("bellows_create_job_from_string", [&] {
    if (out == nullptr) throw Error(ErrorKind::kUsage, "out is NULL", "pass the address of a bellows_trainer*");
    *out = nullptr;
    if (yaml == nullptr) throw Error(ErrorKind::kUsage, "yaml is NULL", "give the config as YAML text");
    if (job == nullptr) throw Error(ErrorKind::kUsage, "job is NULL", "describe the job's processes in a bellows_job");
    return create(bellows::config::Config::parse(yaml, "<config text>"), overrides, n_overrides, out, job);
  });
}

// For the layers over the C API (bellows_c_internal.h): their failures reach bellows_last_error() as the library's own do.
int bellows_internal_fail(int status, const char* message) {
  try {
    last_error = message != nullptr ? message : "";
  } catch (...) {
  }
  return status;
}

int bellows_destroy(bellows_trainer* trainer) {
  return guarded("bellows_destroy", [&] {
    if (trainer == nullptr) return BELLOWS_OK;
    std::shared_ptr<bellows_trainer> handle = find_handle(trainer);
    {
      std::lock_guard lock(handles_mutex);
      handles().erase(trainer);
    }
    handle.reset();  // the trainer goes with the last call in flight (its destructor stops a running session)
    return BELLOWS_OK;
  });
}

int bellows_push(bellows_trainer* trainer, const bellows_tensor* tensors, int32_t count) {
  return guarded("bellows_push", [&] {
    const auto h = find_handle(trainer);
    h->trainer->push(named_views(tensors, count));
    return BELLOWS_OK;
  });
}

int bellows_push_block(bellows_trainer* trainer, const bellows_tensor* tensors, int32_t count) {
  return guarded("bellows_push_block", [&] {
    const auto h = find_handle(trainer);
    h->trainer->push_many(named_views(tensors, count));
    return BELLOWS_OK;
  });
}

int bellows_buffered(bellows_trainer* trainer, int64_t* samples) {
  return guarded("bellows_buffered", [&] {
    const auto h = find_handle(trainer);
    if (samples == nullptr) throw Error(ErrorKind::kUsage, "samples is NULL", "pass the address of an int64_t");
    *samples = h->trainer->buffered();
    return BELLOWS_OK;
  });
}

int bellows_train(bellows_trainer* trainer, int64_t min_samples) {
  return guarded("bellows_train", [&] {
    const auto h = find_handle(trainer);
    h->trainer->train(min_samples);
    return BELLOWS_OK;
  });
}

int bellows_train_async(bellows_trainer* trainer, int64_t min_samples) {
  return guarded("bellows_train_async", [&] {
    const auto h = find_handle(trainer);
    h->trainer->train_async(min_samples);
    return BELLOWS_OK;
  });
}

int bellows_poll(bellows_trainer* trainer) {
  return guarded("bellows_poll", [&] {
    const auto h = find_handle(trainer);
    return h->trainer->poll() ? BELLOWS_RUNNING : BELLOWS_OK;
  });
}

int bellows_wait(bellows_trainer* trainer) {
  return guarded("bellows_wait", [&] {
    const auto h = find_handle(trainer);
    h->trainer->wait();
    return BELLOWS_OK;
  });
}

void bellows_predict_options_init(bellows_predict_options* options) {
  if (options == nullptr) return;
  *options = bellows_predict_options{};
  options->samples = 1;
  options->ema = -1;
}

int bellows_predict(bellows_trainer* trainer, const bellows_tensor* input, bellows_tensor* output, int64_t output_capacity,
                    const bellows_predict_options* options) {
  return guarded("bellows_predict", [&] {
    const auto h = find_handle(trainer);
    if (input == nullptr || output == nullptr) {
      throw Error(ErrorKind::kUsage, fmt::format("input is {}, output is {}", input ? "given" : "NULL", output ? "given" : "NULL"),
                  "pass both tensors");
    }
    const at::ScalarType out_type = scalar_type(output->dtype, "output");
    if (out_type != at::kFloat && out_type != at::kDouble) {
      throw Error(ErrorKind::kUsage, "output dtype must be BELLOWS_FLOAT32 or BELLOWS_FLOAT64", "set output->dtype");
    }
    bellows_predict_options o;
    bellows_predict_options_init(&o);
    if (options != nullptr) o = *options;
    bellows::PredictOptions p;
    p.samples = o.samples;
    p.seed = o.seed;
    p.first_index = o.first_index;
    p.steps = o.steps;
    p.eta = o.eta;
    std::optional<bool> ema;
    if (o.ema == 0 || o.ema == 1) ema = o.ema == 1;
    else if (o.ema != -1) throw Error(ErrorKind::kUsage, fmt::format("options->ema is {}, expected -1, 0 or 1", o.ema), "-1: EMA when present");
    // float32 [rows, ...] from the trainer's thread; converted here by hand, so that no LibTorch kernel (and no
    // OpenMP team) runs on the program's thread (app/online.cpp, ComputeThread).
    const at::Tensor result = h->trainer->predict(view_of(*input, "input"), p, ema);
    if (result.dim() > BELLOWS_MAX_DIMS) throw Error(ErrorKind::kInternal, "the prediction has too many dimensions", "report this bug");
    if (result.numel() > output_capacity || (result.numel() > 0 && output->data == nullptr)) {
      throw Error(ErrorKind::kUsage, fmt::format("the prediction has shape [{}] ({} values), output_capacity is {}{}",
                                                 fmt::join(std::vector<std::int64_t>(result.sizes().begin(), result.sizes().end()), ", "), result.numel(), output_capacity,
                                                 output->data == nullptr ? " and output->data is NULL" : ""),
                  "pass an output buffer of that many elements");
    }
    const float* values = result.const_data_ptr<float>();
    if (out_type == at::kFloat) {
      std::memcpy(output->data, values, static_cast<std::size_t>(result.numel()) * sizeof(float));
    } else {
      double* to = static_cast<double*>(output->data);
      for (std::int64_t i = 0; i < result.numel(); ++i) to[i] = values[i];
    }
    output->ndim = static_cast<int32_t>(result.dim());
    for (int d = 0; d < BELLOWS_MAX_DIMS; ++d) output->shape[d] = d < result.dim() ? result.size(d) : 0;
    return BELLOWS_OK;
  });
}

int bellows_save(bellows_trainer* trainer, char* path_out, size_t path_capacity) {
  return guarded("bellows_save", [&] {
    const auto h = find_handle(trainer);
    return copy_path(h->trainer->save().string(), path_out, path_capacity);
  });
}

int bellows_restore(bellows_trainer* trainer, const char* path) {
  return guarded("bellows_restore", [&] {
    const auto h = find_handle(trainer);
    if (path == nullptr) throw Error(ErrorKind::kUsage, "path is NULL", "give a checkpoint or run directory");
    h->trainer->restore(path);
    return BELLOWS_OK;
  });
}

int bellows_metrics_get(bellows_trainer* trainer, bellows_metrics* out) {
  return guarded("bellows_metrics_get", [&] {
    const auto h = find_handle(trainer);
    if (out == nullptr) throw Error(ErrorKind::kUsage, "out is NULL", "pass the address of a bellows_metrics");
    const bellows::app::OnlineMetrics m = h->trainer->metrics();
    *out = bellows_metrics{m.step,   m.sessions,           m.loss,      m.lr,          m.samples_per_second, m.buffered, m.pushed,
                           m.dropped, m.taken,             m.training ? 1 : 0, m.ranks, m.eval_loss, m.eval_metric, m.rejected,
                           m.rank,   m.restored ? 1 : 0};
    return BELLOWS_OK;
  });
}

int bellows_run_dir(bellows_trainer* trainer, char* path_out, size_t path_capacity) {
  return guarded("bellows_run_dir", [&] {
    const auto h = find_handle(trainer);
    return copy_path(h->trainer->run_dir().string(), path_out, path_capacity);
  });
}

}  // extern "C"
