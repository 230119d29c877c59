// The sink registry: each sink a run writes to (the console, metrics.jsonl, TensorBoard, or a C++ user's) registers
// a SinkEntry from its own file, like a model or a data source. app/ declares each entry's switch key in the run's
// schema (log.tensorboard, ...) and adds the enabled sinks to every run it assembles (`bellows train`, online
// training), so a new sink is one file and one registration line.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/obs/sink.h"  // defines: Sink

namespace bellows::obs {

// Where a run's sinks write.
struct SinkContext {
  std::filesystem::path run_dir;  // the run directory (metrics.jsonl, event files)
  std::FILE* console = nullptr;   // the terminal's stream; null: no console output
  int tty = -1;                   // the console is a terminal: 1, 0, or -1 to detect
  bool console_sessions_only = false;  // online training's console: the header and messages only (obs/console_sink.h)
};

struct SinkEntry {
  std::string name;  // "tensorboard"
  std::string help;  // the switch key's help line in `bellows config keys`
  int order = 0;     // the sinks are added, and hear of each record, in this order
  // The boolean config key that turns it on or off ("log.tensorboard"); "": always on.
  std::string key;
  bool on_by_default = true;
  // The sink for a run; null when there is nothing to write to (a console sink without a console).
  std::function<std::shared_ptr<Sink>(const SinkContext&)> make;
};

std::vector<SinkEntry> sink_entries();  // in `order`
// Registration, one static object per sink (in its own file):
//   const bellows::obs::SinkRegistrar kMineSinkRegistered(mine_sink());
void register_sink(SinkEntry entry);  // kInternal error on a duplicate name
struct SinkRegistrar {
  explicit SinkRegistrar(SinkEntry entry) { register_sink(std::move(entry)); }
};

}  // namespace bellows::obs
