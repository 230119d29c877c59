// The data sources by name (`data.source`): each source declares its config keys and opens its dataset from a
// validated config, registered from its own file under src/data/sources/ like the models are. Adding a source
// is one file and one registration; build.h splits what a source opens into training and validation data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Config
#include "bellows/data/dataset.h"   // defines: Dataset, DataFacts

namespace bellows::data {

class StreamBuffer;

// What a source is opened with.
struct SourceRequest {
  const config::Config* config = nullptr;  // the validated run config: the source reads its own keys
  std::filesystem::path path;              // data.path, or data.val_path for validation data
  std::uint64_t seed = 0;                  // the run's seed
  // Opening validation data: the training dataset, whose class numbering and vocabulary it must share.
  const Dataset* like = nullptr;
  // The buffer a program pushes samples into (data.source: stream); null for the command line.
  std::shared_ptr<StreamBuffer> stream;
};

// A series for sliding windows: "x" [T, F] and optionally "y" [T, K], with a describer of rows for errors.
struct Series {
  std::map<std::string, at::Tensor> tensors;
  std::string name;
  std::function<std::string(std::int64_t)> describe_row;
};

struct SourceEntry {
  std::string name;
  std::string help;
  std::function<void(config::Schema&)> add_keys;  // the source's own keys (may be none)
  std::function<std::shared_ptr<const Dataset>(const SourceRequest&)> open;
  // What a model may learn from the opened dataset (classes, grid, vocabulary); null: nothing beyond shapes.
  std::function<DataFacts(const Dataset&)> facts;
  // The facts without reading the data's values (a model rebuilt from a checkpoint's config); null: none.
  std::function<DataFacts(const SourceRequest&)> facts_without_data;
  std::function<Series(const SourceRequest&)> read_series;  // null: no sliding windows over this source
  bool needs_path = true;   // data.path must be set
  bool temporal = false;    // samples are ordered in time: validation is the tail by default
  bool has_val_path = true; // data.val_path may name separate validation data
  std::string auto_split;   // data.val_split: auto takes this ("tail", "random"); empty: tail when temporal
  std::string path_hint = "set data.path to the data file";
};

// Every registered source, sorted by name.
std::vector<SourceEntry> source_registry();
std::vector<std::string> source_names();

// Registration, one static object per source (in its own file): bellows' sources and a C++ user's.
//   static const bellows::data::SourceRegistrar kMySourceRegistered(my_source());
// (Inside the library, file-local names must differ between files: the unity build compiles several together.)
void register_source(SourceEntry entry);  // kInternal error on a duplicate name
struct SourceRegistrar {
  explicit SourceRegistrar(SourceEntry entry) { register_source(std::move(entry)); }
};

// kConfig error naming the unknown source and suggesting the closest registered name.
const SourceEntry& find_source(const std::string& name);

}  // namespace bellows::data
