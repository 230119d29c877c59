// Pipelines of runs (seed 003: an MLP, an LSTM and a Transformer trained one after another in one command).
// A pipeline file is YAML with one key, `pipeline`, listing run configs relative to the file:
//   pipeline: [mlp.yaml, lstm.yaml, transformer.yaml]
// `bellows train pipeline.yaml [key=value ...]` resolves every stage first (the overrides apply to each), so a
// mistake in the last config fails before the first stage trains; then trains them in order. Each stage's
// model, optimizer, data loaders and cached memory are released before the next one starts, and the tensor
// memory left over is reported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "bellows/app/run.h"  // defines: RunOptions, RunResult

namespace bellows::app {

// Whether `file` is a pipeline file (a YAML mapping with a top-level `pipeline` key). kConfig error for an
// unreadable or malformed YAML file.
bool is_pipeline_file(const std::filesystem::path& file);

// The stage configs listed in a pipeline file, as paths; kConfig errors name the file and the entry.
std::vector<std::filesystem::path> pipeline_stages(const std::filesystem::path& file);

struct StageResult {
  std::filesystem::path config;
  std::string name;               // the run's name
  RunResult run;
  std::int64_t peak_bytes = -1;   // peak tensor memory on the run's device during the stage (-1: not counted)
  std::int64_t left_bytes = -1;   // tensor memory still held after the stage was released (-1: not counted)
};

// Trains the stages in order; stops after a stage that was interrupted (its result is the last one). Errors
// of a stage name it ("pipeline stage 2 of 3 (lstm.yaml): ...").
std::vector<StageResult> run_pipeline(const std::filesystem::path& file, const std::vector<std::string>& args,
                                      const RunOptions& options = {});

}  // namespace bellows::app
