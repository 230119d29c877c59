// The autotuner and tuned plans; see tune.h.
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/data/build.h"
#include "bellows/lab/tune.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bellows/app/data_setup.h"
#include "bellows/app/run.h"
#include "bellows/hw/recommendation.h"
#include "bellows/precision/registry.h"
#include "bellows/app/schema.h"
#include "bellows/config/schema.h"
#include "bellows/models/registry.h"
#include "bellows/plan/plan.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/cache.h"
#include "bellows/util/check.h"

namespace bellows::lab {
namespace fs = std::filesystem;

namespace tune_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const std::vector<std::string> kAllowable = {"precision", "batch_size"};

std::string first_on_command_line(const config::Config& c, const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    if (app::on_command_line(c, k)) return k;
  }
  return "";
}

// The key of a "key=value" override.
std::string key_of(const std::string& assignment) { return assignment.substr(0, assignment.find('=')); }

void add_loader_dimension(TuneSpace& space, const config::Config& c, const plan::Plan& p, const hw::HardwareInfo& hw) {
  if (const std::string k = first_on_command_line(c, {"threads", "data.workers", "data.prefetch"}); !k.empty()) {
    space.notes.push_back(fmt::format("loader: not searched ({} is set on the command line)", k));
    return;
  }
  if (data::data_options(c).source == "stream") {
    space.notes.push_back("loader: not searched (data.source: stream: the program pushes the samples)");
    return;
  }
  const int cores = std::max(1, hw.cpu.usable_cpus);
  const std::int64_t prefetch = app::loader_settings(c).loader.prefetch;
  TuneDimension d{"loader", {}, false};
  d.values.push_back({fmt::format("as configured (threads={}, workers={}, prefetch={})", p.threads, p.workers, prefetch), {}});
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  auto add = [&](std::int64_t t, std::int64_t w, std::int64_t pf) {
    if (t < 1 || !seen.insert({t, w, pf}).second) return;
    const std::string label = w == 0 ? fmt::format("threads={} workers=0", t) : fmt::format("threads={} workers={} prefetch={}", t, w, pf);
    d.values.push_back({label, {fmt::format("threads={}", t), fmt::format("data.workers={}", w), fmt::format("data.prefetch={}", pf)}});
  };
  if (p.device.is_cpu()) {
    // Intra-op threads and loader workers share the cores: every split of them, and the prefetch depth with workers.
    for (std::int64_t w = 0; w <= std::min(2, cores); ++w) {
      for (const std::int64_t t : {static_cast<std::int64_t>(cores), static_cast<std::int64_t>(cores) - w}) {
        if (w == 0) add(t, 0, prefetch);
        else
          for (const std::int64_t pf : {2 * w, 4 * w}) add(t, w, pf);
      }
    }
  } else {
    // On a GPU the CPU threads feed it: workers (one batch each ahead, twice that queued), the threads as planned.
    for (const std::int64_t w : {0, 2, 4, 8}) {
      if (w <= cores) add(p.threads, w, w == 0 ? prefetch : 2 * w);
    }
  }
  space.dimensions.push_back(std::move(d));
}

// The precisions worth a trial here (the configured one aside): full precision and what `auto` picks, and each policy
// the device runs natively (precision/registry.h: PrecisionEntry::worth_trying); why the others are not tried.
std::vector<std::string> precision_candidates(const config::Config& c, const plan::Plan& p, const hw::HardwareInfo& hw, std::string* note) {
  const std::string auto_pick = app::plan_with_auto_precision(c, hw).precision;
  const auto index = static_cast<std::size_t>(std::max<c10::DeviceIndex>(0, p.device.index()));
  const precision::DeviceFacts device = p.device.is_cuda() && index < hw.cuda.gpus.size() ? hw::device_facts(hw.cuda.gpus[index])
                                                                                          : hw::device_facts(hw.cpu);
  std::vector<std::string> out, not_tried;
  for (const bool mixed : {false, true}) {  // full precision first, then auto's pick, then the mixed policies
    if (mixed) out.push_back(auto_pick);
    for (const precision::PrecisionEntry& e : precision::precision_entries()) {
      if (e.mixed() != mixed) continue;
      const bool tried = e.worth_trying && e.worth_trying(device);
      if (tried) out.push_back(e.name);
      const std::string caveat = e.caveat ? e.caveat(device) : std::string();
      if (!tried && mixed && e.name != auto_pick && !caveat.empty()) {
        not_tried.push_back(fmt::format("precision: {} not searched ({})", e.name, caveat));
      }
    }
  }
  if (!not_tried.empty()) *note = fmt::format("{}", fmt::join(not_tried, "; "));
  std::vector<std::string> unique;
  for (const auto& s : out) {
    if (s != p.precision && std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(s);
  }
  return unique;
}

// The point of the space with value index idx[d] in dimension d: its overrides and its name.
std::vector<std::string> point_overrides(const TuneSpace& s, const std::vector<std::size_t>& idx) {
  std::vector<std::string> out;
  for (std::size_t d = 0; d < s.dimensions.size(); ++d) {
    const auto& o = s.dimensions[d].values[idx[d]].overrides;
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}
std::string point_name(const TuneSpace& s, const std::vector<std::size_t>& idx) {
  std::string out;
  for (std::size_t d = 0; d < s.dimensions.size(); ++d) {
    if (idx[d] != 0) out += (out.empty() ? "" : ", ") + s.dimensions[d].values[idx[d]].label;
  }
  return out.empty() ? "baseline" : out;
}

struct LoaderSetting {
  std::int64_t threads = -1, workers = -1, prefetch = -1;
};
// A loader value's settings (-1 for the configured value, which sets none).
LoaderSetting loader_setting(const TuneValue& v) {
  auto value = [&](const std::string& key) -> std::int64_t {
    for (const auto& o : v.overrides) {
      if (o.rfind(key + "=", 0) == 0) return std::stoll(o.substr(key.size() + 1));
    }
    return -1;
  };
  return {value("threads"), value("data.workers"), value("data.prefetch")};
}

// Whether a loader value sets what a trial ran: its threads and workers, and its prefetch depth where it had workers.
bool same_loader(const TuneValue& v, const Trial& t) {
  const LoaderSetting l = loader_setting(v);
  return l.threads == t.threads && l.workers == t.workers && (l.workers == 0 || l.prefetch == t.prefetch);
}

// The memory a step may use, MB: memory_budget_gib, else the GPU's memory, else what the machine has available.
double memory_budget_mb(const config::Config& c, const Trial& base, const hw::HardwareInfo& hw) {
  const double gib = app::run_settings(c).memory_budget_gib;
  if (gib > 0) return gib * double(1LL << 30) / 1e6;
  if (base.device.rfind("cuda", 0) == 0 && !hw.cuda.gpus.empty()) return hw.cuda.gpus[0].total_memory_bytes / 1e6;
  return hw.memory.available_bytes / 1e6;
}

// --- the space's dimensions, in the order they are searched ---

// The configured precision first, then the candidates here; only with plan.allow: [precision].
void add_precision_dimension(TuneSpace& space, const config::Config& c, const plan::Plan& p, const hw::HardwareInfo& hw, bool allowed) {
  if (!allowed) {
    space.notes.push_back(fmt::format("precision: not searched (it changes the numerics; plan.allow: [precision] lets the tuner choose), {} as planned", p.precision));
  } else if (app::on_command_line(c, "precision")) {
    space.notes.push_back("precision: not searched (set on the command line)");
  } else {
    std::string note;
    TuneDimension d{"precision", {{p.precision + " (configured)", {}}}, true};
    for (const auto& candidate : precision_candidates(c, p, hw, &note)) d.values.push_back({candidate, {"precision=" + candidate}});
    if (!note.empty()) space.notes.push_back(note);
    if (d.values.size() > 1) space.dimensions.push_back(std::move(d));
  }
}

// micro-batch x accumulation, the samples per optimizer step kept; only with plan.allow: [batch_size].
void add_micro_batch_dimension(TuneSpace& space, const config::Config& c, bool allowed) {
  const app::LoaderSettings loader = app::loader_settings(c);
  if (!allowed) {
    space.notes.push_back("micro_batch: not searched (a different micro-batch changes the numerics: rounding, batch statistics; "
                          "plan.allow: [batch_size] lets the tuner choose)");
  } else if (loader.batch_auto) {
    space.notes.push_back("micro_batch: not searched (data.batch_size: auto: the batch-size finder measures it in the run)");
  } else if (const std::string k = first_on_command_line(c, {"data.batch_size", "train.accumulation_steps"}); !k.empty()) {
    space.notes.push_back(fmt::format("micro_batch: not searched ({} is set on the command line)", k));
  } else {
    const std::int64_t b = loader.batch_size, a = app::trainer_settings(c).accumulation_steps;
    TuneDimension d{"micro_batch", {{fmt::format("{} x {} (configured)", b, a), {}}}, true};
    auto add = [&](std::int64_t mb, std::int64_t acc) {
      d.values.push_back({fmt::format("batch {} x accumulation {}", mb, acc), {fmt::format("data.batch_size={}", mb), fmt::format("train.accumulation_steps={}", acc)}});
    };
    if (b % 2 == 0 && b >= 2) add(b / 2, 2 * a);
    if (a % 2 == 0) add(2 * b, a / 2);
    if (d.values.size() > 1) space.dimensions.push_back(std::move(d));
  }
}

// channels_last, cuDNN's algorithm search: models with 2-D convolutions (4-D tensors)
void add_convolution_dimensions(TuneSpace& space, const config::Config& c, const plan::Plan& p, const models::ModelEntry& model, bool convolutional) {
  if (!convolutional) {
    space.notes.push_back(fmt::format("channels_last: not searched (model {} has no 2-D convolutions, whose 4-D tensors channels_last lays out)", model.name));
  } else if (app::on_command_line(c, "channels_last")) {
    space.notes.push_back("channels_last: not searched (set on the command line)");
  } else {
    const bool cl = app::plan_request(c).channels_last;
    space.dimensions.push_back({"channels_last", {{fmt::format("channels_last={} (configured)", cl), {}}, {fmt::format("channels_last={}", !cl), {fmt::format("channels_last={}", !cl)}}}, false});
  }
  if (!p.device.is_cpu() && convolutional && !app::on_command_line(c, "cudnn_benchmark")) {
    const bool on = p.cudnn_benchmark;
    space.dimensions.push_back({"cudnn_benchmark", {{fmt::format("cudnn_benchmark={} (configured)", on), {}}, {fmt::format("cudnn_benchmark={}", !on), {fmt::format("cudnn_benchmark={}", !on)}}}, false});
  }
}

// activation checkpointing: only where memory can be what limits the run
void add_checkpointing_dimension(TuneSpace& space, const config::Config& c, const plan::Plan& p) {
  const app::RunSettings run = app::run_settings(c);
  if (p.device.is_cpu() && run.memory_budget_gib <= 0) {
    space.notes.push_back("checkpointing: not searched (it trades time for memory; on the CPU without memory_budget_gib the memory is not the limit)");
  } else if (app::on_command_line(c, "checkpointing")) {
    space.notes.push_back("checkpointing: not searched (set on the command line)");
  } else {
    const bool none = run.checkpointing.empty();
    space.dimensions.push_back({"checkpointing", {{none ? "no checkpointing (configured)" : "checkpointing as configured", {}},
                                                  {none ? "checkpointing=[*]" : "checkpointing=[]", {none ? "checkpointing=['*']" : "checkpointing=[]"}}}, false});
  }
}

// whole steps as CUDA graphs: a trial that cannot capture (train/step_graph.h) trains eagerly and says why
void add_compile_dimension(TuneSpace& space, const config::Config& c, const plan::Plan& p) {
  if (p.device.is_cpu()) return;
  if (app::on_command_line(c, "compile")) {
    space.notes.push_back("compile: not searched (set on the command line)");
  } else {
    const std::string configured = app::run_settings(c).compile;
    const std::string other = configured == "off" ? "compile=cuda_graph" : "compile=off";
    space.dimensions.push_back({"compile", {{fmt::format("compile={} (configured)", configured), {}}, {other, {other}}}, false});
  }
}

}  // namespace tune_impl

using namespace tune_impl;

std::size_t TuneSpace::grid_size() const {
  std::size_t n = 1;
  for (const auto& d : dimensions) n *= d.values.size();
  return n;
}

TuneSpace tune_space(const config::Config& c, const hw::HardwareInfo& hw) {
  TuneSpace space;
  const app::RunSettings run = app::run_settings(c);
  const std::vector<std::string>& allow = run.plan_allow;
  for (const auto& a : allow) {
    BELLOWS_CHECK_CONFIG(std::find(kAllowable.begin(), kAllowable.end(), a) != kAllowable.end(),
                         fmt::format("plan.allow: '{}' is not a setting the tuner may change ({})", a, c.origin("plan.allow").str()),
                         fmt::format("allowed entries: {}", fmt::join(kAllowable, ", ")));
  }
  auto allowed = [&](const std::string& what) { return std::find(allow.begin(), allow.end(), what) != allow.end(); };
  const plan::Plan p = plan::resolve(app::plan_request(c), hw);
  const models::ModelEntry& model = models::find_model(run.model_name);
  const bool convolutional = models::is_convolutional(model, c);
  add_precision_dimension(space, c, p, hw, allowed("precision"));
  add_micro_batch_dimension(space, c, allowed("batch_size"));
  add_loader_dimension(space, c, p, hw);
  add_convolution_dimensions(space, c, p, model, convolutional);
  add_checkpointing_dimension(space, c, p);
  add_compile_dimension(space, c, p);
  return space;
}

namespace tune_impl {

// The report's header: the config, the machine, the budget and what is not searched.
TuneReport begin_tune_report(const config::Config& c, const TuneOptions& options, const hw::HardwareInfo& hw, const TuneSpace& space) {
  const app::RunSettings run = app::run_settings(c);
  TuneReport plan;
  plan.config_name = run.name;
  plan.config_key = app::tune_config_key(c);
  plan.machine = app::machine_line(hw);
  plan.machine_key = app::tune_machine_key(hw);
  plan.mode = options.grid ? "grid" : "tune";
  plan.budget_s = options.budget_s;
  plan.allow = run.plan_allow;
  plan.notes = space.notes;
  return plan;
}

// A loader value that sets what the baseline ran (the configured `auto`s resolved) is the baseline again; then
// dimensions left with one value are not searched.
void drop_baseline_repeats(TuneSpace& space, const Trial& base) {
  for (auto& dim : space.dimensions) {
    if (dim.id != "loader") continue;
    dim.values.erase(std::remove_if(dim.values.begin() + 1, dim.values.end(), [&](const TuneValue& v) { return same_loader(v, base); }),
                     dim.values.end());
  }
  std::erase_if(space.dimensions, [](const TuneDimension& d) { return d.values.size() < 2; });
}

// The search in progress: the trials so far (in the report) and the best point.
struct TuneSearch {
  TrialRunner& runner;
  const TuneSpace& space;
  TuneReport& plan;
  const TuneOptions& options;
  Clock::time_point start;
  double full = 0;     // seconds of a full trial
  double setup_s = 0;  // a trial's setup, as the baseline's
  double short_s = 0;  // seconds of a candidate's trial
  Trial best;
  std::vector<std::size_t> best_idx;
  bool out_of_budget = false;
};

// Every point, in mixed-radix order (the baseline, all zeros, is measured already).
void tune_grid(TuneSearch& s) {
  const std::size_t dims = s.space.dimensions.size();
  std::vector<std::size_t> idx(dims, 0);
  for (std::size_t n = 1; n < s.space.grid_size() && !s.runner.stopped(); ++n) {
    for (std::size_t d = 0; d < dims; ++d) {  // increment
      if (++idx[d] < s.space.dimensions[d].values.size()) break;
      idx[d] = 0;
    }
    Trial t = s.runner.run(point_name(s.space, idx), point_overrides(s.space, idx), s.full, kFullTrialSteps);
    s.plan.trials.push_back({t, "", t.measured() ? "grid" : "failed"});
    if (t.measured() && t.samples_per_s > s.best.samples_per_s) {
      s.best = t;
      s.best_idx = idx;
    }
  }
}

// Short trials of `candidates` (values of dimension d): the fastest that beats the best by kTuneMinGain, if any.
std::optional<std::pair<std::size_t, Trial>> tune_candidates(TuneSearch& s, std::size_t d, const std::vector<std::size_t>& candidates) {
  const TuneDimension& dim = s.space.dimensions[d];
  std::optional<std::pair<std::size_t, Trial>> leader;
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    const std::size_t v = candidates[k];
    if (seconds_since(s.start) + s.setup_s + s.short_s > s.options.budget_s) {
      s.plan.notes.push_back(fmt::format("budget: {} of {}'s {} candidates not tried ({:.0f} s of {:.0f} s used)", candidates.size() - k,
                                         dim.id, candidates.size(), seconds_since(s.start), s.options.budget_s));
      s.out_of_budget = true;
      break;
    }
    std::vector<std::size_t> idx = s.best_idx;
    idx[d] = v;
    Trial t = s.runner.run(point_name(s.space, idx), point_overrides(s.space, idx), s.short_s, kCandidateTrialSteps, false, kLoserRatio * s.best.samples_per_s);
    std::string status = !t.measured() ? "failed" : t.stopped_early ? "loser" : "slower";
    if (t.measured() && !t.stopped_early && t.samples_per_s >= kTuneMinGain * s.best.samples_per_s &&
        (!leader || t.samples_per_s > leader->second.samples_per_s)) {
      leader = std::make_pair(v, t);
      status = "candidate";
    }
    s.plan.trials.push_back({t, dim.id, status});
  }
  return leader;
}

// One stage: short trials of `candidates`, then the leader confirmed at full length and adopted if faster.
void tune_stage(TuneSearch& s, std::size_t d, const std::vector<std::size_t>& candidates) {
  const auto leader = tune_candidates(s, d, candidates);
  if (!leader) return;
  std::vector<std::size_t> idx = s.best_idx;
  idx[d] = leader->first;
  if (seconds_since(s.start) + s.setup_s + s.full > s.options.budget_s) {
    s.plan.notes.push_back(fmt::format("budget: {} ({:.2f}x in its short trial) not confirmed, not adopted", point_name(s.space, idx),
                                       leader->second.samples_per_s / s.best.samples_per_s));
    s.out_of_budget = true;
    return;
  }
  Trial t = s.runner.run(point_name(s.space, idx), point_overrides(s.space, idx), s.full, kFullTrialSteps);
  const bool adopt = t.measured() && t.samples_per_s > s.best.samples_per_s;
  s.plan.trials.push_back({t, s.space.dimensions[d].id, adopt ? "adopted" : "not confirmed"});
  if (adopt) {
    s.best = t;
    s.best_idx = idx;
  }
}

// The loader in two stages. First the number of workers, each with the most threads and the shallowest
// prefetch; then, for the workers chosen, fewer threads, and a deeper prefetch only where the step waits for
// data (a deeper queue helps only a consumer that waits).
void tune_loader(TuneSearch& s, std::size_t d) {
  const TuneDimension& dim = s.space.dimensions[d];
  std::int64_t most_threads = 0;
  for (const auto& v : dim.values) most_threads = std::max(most_threads, loader_setting(v).threads);
  std::map<std::int64_t, std::int64_t> shallowest;  // workers -> prefetch
  for (std::size_t v = 1; v < dim.values.size(); ++v) {
    const LoaderSetting l = loader_setting(dim.values[v]);
    if (!shallowest.count(l.workers) || l.prefetch < shallowest[l.workers]) shallowest[l.workers] = l.prefetch;
  }
  std::vector<std::size_t> stage;
  for (std::size_t v = 1; v < dim.values.size(); ++v) {
    const LoaderSetting l = loader_setting(dim.values[v]);
    if (l.threads == most_threads && l.prefetch == shallowest[l.workers] && l.workers != s.best.workers) stage.push_back(v);
  }
  tune_stage(s, d, stage);
  if (s.out_of_budget || s.runner.stopped()) return;
  const bool waits = data_fraction(s.best) >= kPrefetchBoundFraction;
  std::vector<std::size_t> second;
  std::size_t deeper = 0;
  for (std::size_t v = 1; v < dim.values.size(); ++v) {
    const LoaderSetting l = loader_setting(dim.values[v]);
    if (v == s.best_idx[d] || l.workers != s.best.workers || std::find(stage.begin(), stage.end(), v) != stage.end()) continue;
    if (l.prefetch != shallowest[l.workers] && !waits) {
      ++deeper;
      continue;
    }
    second.push_back(v);
  }
  if (deeper > 0) {
    s.plan.notes.push_back(fmt::format("loader: {} deeper prefetch queue(s) pruned (waiting for data is {:.1f}% of the step with {} worker(s), "
                                       "under {:.0f}%: a deeper queue helps only a step that waits)",
                                       deeper, 100 * data_fraction(s.best), s.best.workers, 100 * kPrefetchBoundFraction));
  }
  tune_stage(s, d, second);
}

// Checkpointing only trades time for memory: pruned while the best point's peak is well under the budget.
bool checkpointing_pruned(TuneSearch& s, const config::Config& c, const hw::HardwareInfo& hw) {
  const double budget = memory_budget_mb(c, s.best, hw), peak = s.best.peak_mb();
  if (peak >= 0 && peak < kCheckpointMemoryFraction * budget) {
    s.plan.notes.push_back(fmt::format("checkpointing: pruned (peak memory {:.0f} MB is {:.0f}% of the {:.0f} MB budget; it would only cost time)",
                                       peak, 100 * peak / budget, budget));
    return true;
  }
  return false;
}

// Coordinate descent: the dimensions one at a time, each from the best point so far.
void tune_dimensions(TuneSearch& s, const config::Config& c, const hw::HardwareInfo& hw) {
  for (std::size_t d = 0; d < s.space.dimensions.size() && !s.out_of_budget && !s.runner.stopped(); ++d) {
    const TuneDimension& dim = s.space.dimensions[d];
    // Pruned by the measurements so far.
    if (dim.id == "checkpointing" && checkpointing_pruned(s, c, hw)) continue;
    if (dim.id == "loader") {
      tune_loader(s, d);
      continue;
    }
    std::vector<std::size_t> candidates;
    for (std::size_t v = 0; v < dim.values.size(); ++v) {
      if (v != s.best_idx[d]) candidates.push_back(v);
    }
    tune_stage(s, d, candidates);
  }
  if (s.runner.stopped()) s.plan.notes.push_back("stopped by a signal before the search ended");
}

// The winner: its settings that differ from the configured ones, and its trial marked.
void record_tune_winner(TuneSearch& s) {
  TuneReport& plan = s.plan;
  for (std::size_t d = 0; d < s.space.dimensions.size(); ++d) {
    if (s.best_idx[d] == 0) continue;
    const TuneDimension& dim = s.space.dimensions[d];
    for (const auto& o : dim.values[s.best_idx[d]].overrides) {
      plan.overrides.push_back(o);
      if (dim.changes_numerics) plan.changes_numerics.push_back(key_of(o));
    }
  }
  plan.winner = s.best.name;
  plan.samples_per_s = s.best.samples_per_s;
  for (auto& t : plan.trials) {
    if (t.trial.name == s.best.name && (t.status == "adopted" || t.status == "grid" || t.status == "baseline")) {
      t.status = t.status == "baseline" ? "baseline, winner" : "winner";
      break;
    }
  }
}

}  // namespace tune_impl

TuneReport tune(const config::Config& c, const TuneOptions& options) {
  BELLOWS_CHECK_CONFIG(options.budget_s > 0 && std::isfinite(options.budget_s), fmt::format("the tuner's budget is {} s, expected > 0", options.budget_s),
                       "give --budget a duration such as 60s or 2m");
  const Clock::time_point start = Clock::now();
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  TuneSpace space = tune_space(c, hw);
  TuneReport plan = begin_tune_report(c, options, hw, space);
  const double full = options.trial_seconds > 0 ? options.trial_seconds : std::clamp(options.budget_s / 30, 0.5, 5.0);
  plan.trial_seconds = full;

  // --- the baseline ---
  TrialRunner runner(c, "plan", options.progress, options.stop_flag);
  const Trial base = runner.run("baseline", {}, full, kFullTrialSteps, /*baseline=*/true);
  if (!base.measured() && runner.stopped()) {  // a signal during the baseline: nothing measured to plan from
    plan.trials.push_back({base, "", "baseline"});
    plan.notes.push_back("stopped by a signal during the baseline trial: nothing measured");
    plan.seconds = seconds_since(start);
    plan.trial_count = plan.trials.size();
    return plan;
  }
  BELLOWS_CHECK_RESOURCE(base.measured(), fmt::format("the configured run did not train 3 steps in its trial: {}", base.error.empty() ? "too slow" : base.error),
                         "run bellows train with this config to see why; bellows doctor diagnoses it");
  plan.trials.push_back({base, "", "baseline"});
  drop_baseline_repeats(space, base);
  plan.baseline_samples_per_s = base.samples_per_s;

  // --- the search: the grid, or the tuner ---
  const double setup_s = std::max(0.0, base.seconds - base.fit_seconds);
  const double step_s = std::max(base.step_ms, base.first_step_ms) / 1e3;
  const double short_s = std::max(full / 2, kCandidateTrialSteps * step_s);  // a candidate's trial: half a full one
  TuneSearch search{runner, space, plan, options, start, full, setup_s, short_s, base, std::vector<std::size_t>(space.dimensions.size(), 0), false};
  if (options.grid) tune_grid(search);
  else tune_dimensions(search, c, hw);
  record_tune_winner(search);
  plan.seconds = seconds_since(start);
  plan.trial_count = plan.trials.size();
  return plan;
}

namespace tune_impl {

nlohmann::json trial_json(const TuneTrial& t) {
  nlohmann::json j = {{"name", t.trial.name}, {"overrides", t.trial.overrides}, {"dimension", t.dimension}, {"status", t.status},
                      {"samples_per_s", t.trial.samples_per_s}, {"step_ms", t.trial.step_ms}, {"step_spread", t.trial.step_spread},
                      {"steps", t.trial.steps}, {"seconds", t.trial.seconds}, {"peak_mb", t.trial.peak_mb()}};
  if (!t.trial.error.empty()) j["error"] = t.trial.error;
  return j;
}

}  // namespace tune_impl

nlohmann::json TuneReport::to_json() const {
  nlohmann::json j = app::TunedPlan::to_json();
  j["trials"] = nlohmann::json::array();
  for (const auto& t : trials) j["trials"].push_back(trial_json(t));
  return j;
}

std::string TuneReport::to_text() const {
  std::string out = fmt::format("bellows plan: {} on {}\n", config_name, machine);
  const std::size_t n = trials.size();
  out += mode == "grid" ? fmt::format("exhaustive grid: {} trials of {:.1f} s in {:.0f} s\n", n, trial_seconds, seconds)
                        : fmt::format("tuner: {} trials in {:.0f} s of a {:.0f} s budget (full trials {:.1f} s, candidates half)\n", n, seconds,
                                      budget_s, trial_seconds);
  std::size_t width = 5;
  for (const auto& t : trials) width = std::max(width, t.trial.name.size());
  width = std::min<std::size_t>(width, 60);
  out += fmt::format("  {:<{}}  {:<16} {:>11} {:>7} {:>10} {:>9}\n", "trial", width, "status", "samples/s", "x base", "ms/step", "peak MB");
  for (const auto& t : trials) {
    const Trial& r = t.trial;
    const std::string ratio = baseline_samples_per_s > 0 && r.samples_per_s > 0 ? fmt::format("{:.2f}", r.samples_per_s / baseline_samples_per_s) : "-";
    const std::string name = r.name.size() > width ? r.name.substr(0, width - 3) + "..." : r.name;
    const double peak = r.peak_mb();
    out += fmt::format("  {:<{}}  {:<16} {:>11} {:>7} {:>10.3g} {:>9}\n", name, width, t.status, r.samples_per_s > 0 ? format_rate(r.samples_per_s) : "-",
                       ratio, r.step_ms, peak >= 0 ? fmt::format("{:.0f}", peak) : "-");
    if (!r.error.empty()) out += fmt::format("      ended: {}\n", r.error);
  }
  const double gain = baseline_samples_per_s > 0 ? samples_per_s / baseline_samples_per_s : 1;
  if (overrides.empty()) {
    out += fmt::format("winner: the configured settings ({} samples/s): nothing to change\n", format_rate(samples_per_s));
  } else {
    out += fmt::format("winner: {}: {} samples/s, {:.2f}x the configured\n", winner, format_rate(samples_per_s), gain);
    out += fmt::format("settings: {}\n", fmt::join(overrides, " "));
  }
  if (!changes_numerics.empty()) out += fmt::format("changes the numerics: {} (allowed by plan.allow)\n", fmt::join(changes_numerics, ", "));
  for (const auto& note : notes) out += "  - " + note + "\n";
  return out;
}

void write_tuned_plan(const TuneReport& plan, const fs::path& path) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  write_file_atomically(path, plan.to_json().dump(2) + "\n");
}

namespace {

// `--plan auto` (app/tuned_plan.h) tunes with the default options when no plan is cached, and caches the report.
const bool kPlanTunerRegistered = [] {
  app::set_plan_tuner([](const config::Config& c, const fs::path& file) -> app::TunedPlan {
    const TuneReport report = tune(c);
    write_tuned_plan(report, file);
    return report;
  });
  return true;
}();

}  // namespace

}  // namespace bellows::lab
