// Config-driven training runs; see run.h. The run itself is assembled by assemble_run (run_assembly.h), whose common
// stages online training shares.
#include "bellows/app/run.h"

#include <fmt/format.h>

#include "bellows/config/binding.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/precision/registry.h"
#include "bellows/plan/plan.h"
#include "run_assembly.h"

namespace bellows::app {

namespace {

// The plan's keys (what the hardware decides unless they are set), bound to the request once (config/binding.h).
const config::Binding<plan::PlanRequest>& plan_binding() {
  using R = plan::PlanRequest;
  return config::bound<R>("", [](config::Binding<R>& b) {
    b.key("device", &R::device, "auto | cpu | cuda | cuda:N");
    std::vector<std::string> precisions = {"auto"};
    for (const auto& p : precision::precision_names()) precisions.push_back(p);  // the registered policies
    b.key("precision", &R::precision, "numeric precision policy").choices(precisions);
    b.key("threads", &R::threads, "intra-op CPU threads (0: one per usable core)").min(0);
    b.key("deterministic", &R::deterministic, "deterministic algorithms and cuDNN; bitwise-reproducible runs");
    b.key("cudnn_benchmark", &R::cudnn_benchmark, "let cuDNN time its algorithms").choices({"auto", "true", "false"});
    b.key("cpu_allocator", &R::cpu_allocator, "freed CPU memory: auto/retain (kept for the next step), system (glibc's trimming)")
        .choices({"auto", "retain", "system"});
    b.key("channels_last", &R::channels_last, "NHWC memory format for 4-D tensors (convolutional models)");
    b.key("data.workers", &R::workers, "loading threads (0: in the training thread; -1: planned)").min(-1);
    b.key("data.pin_memory", &R::pin_memory, "pinned host batches for asynchronous device copies").choices({"auto", "true", "false"});
    b.key("data.on_device", &R::on_device, "keep in-memory data on the training device and gather batches there (auto: on a GPU "
          "when it fits in a quarter of its memory)").choices({"auto", "true", "false"});
  });
}

}  // namespace

void add_plan_keys(config::Schema& schema) { plan_binding().declare(schema); }

plan::PlanRequest plan_request(const config::Config& c) { return plan_binding().read(c); }

plan::Plan plan_with_auto_precision(const config::Config& c, const hw::HardwareInfo& hw) {
  plan::PlanRequest request = plan_request(c);
  request.precision = "auto";
  return plan::resolve(request, hw);
}

RunResult run(const config::Config& c, const RunOptions& options) {
  AssembledRun a = assemble_run(c, options);

  // --- train ---
  RunResult result;
  result.run_dir = a.run_dir;
  result.fit = a.trainer->fit(*a.loaders->train, a.loaders->val.get());
  result.data = a.loaders->train->stats();
  if (options.console && a.strategy->is_main()) {  // after the summary table, so to the console only (metrics.jsonl ends with the run's end record)
    const data::LoaderStats& d = result.data;
    std::fprintf(options.console, "%s\n",
                 fmt::format("data: {}; the training step waited for batches {:.1f}% of {:.1f} s; queue peak {:.1f} MB; "
                             "`bellows bench data` measures the pipeline alone",
                             d.on_device      ? std::string("kept on the device, batches gathered there (data.on_device)")
                             : d.workers > 0 ? fmt::format("{} worker(s), prefetch {}", d.workers, d.prefetch)
                                             : std::string("synchronous"),
                             d.wall_seconds > 0 ? 100 * d.wait_seconds / d.wall_seconds : 0.0, d.wall_seconds,
                             d.queue_bytes_peak / 1e6).c_str());
  }
  return result;
}

}  // namespace bellows::app
