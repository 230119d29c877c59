// The checkpoint directory format (docs/architecture.md, "Files on disk"):
//
//   <checkpoints>/step-000001234/
//     model.safetensors   parameters and buffers by name: standard safetensors, readable by Python
//     state.bin           everything else with state (optimizer, scaler, schedule, EMA, sampler, RNG,
//                         counters) as a StateDict, stored in the safetensors layout (exact, no pickle)
//     manifest.json       format and version, bellows and LibTorch versions, step, epoch, free-form info
//                         (config, plan, metric), and the SHA-256 and size of every other file
//
// Written atomically: into `.tmp-step-...` beside it, each file fsynced, the manifest last, the directory
// fsynced, then renamed into place and the parent fsynced. A directory without a manifest whose checksums
// hold is not a checkpoint: readers skip it, saying why.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::ckpt {

inline constexpr std::int64_t kFormatVersion = 1;  // the whole layout's; the sharded layout is 2 (ckpt/sharded.h)
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kStateFile = "state.bin";
inline constexpr const char* kManifestFile = "manifest.json";

struct Checkpoint {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  // Written by: one process ("whole" layout), or the ranks of a job, each its share ("sharded": ckpt/sharded.h).
  std::string layout = "whole";
  std::int64_t world_size = 1;  // sharded: the writers
  std::map<std::string, at::Tensor> model;  // parameters and buffers (any device: saved from the CPU)
  StateDict state;
  nlohmann::json info = nlohmann::json::object();  // config, plan, metric, ...: stored in the manifest
};

struct Manifest {
  std::int64_t format_version = 0;
  std::string layout = "whole";  // "sharded": format_version 2 (ckpt/sharded.h)
  std::int64_t world_size = 1;   // sharded: the ranks that wrote it, a shard each
  // sharded: every tensor, {"model": {name: {"dtype", "shape", "file"}}, "state": {key: {...}}}
  nlohmann::json tensors = nlohmann::json::object();
  std::string bellows_version;
  std::string torch_version;
  std::string created_utc;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  nlohmann::json info;
  std::map<std::string, std::pair<std::string, std::uint64_t>> files;  // name -> (sha256, bytes)
};

// "step-000001234"; the step's checkpoint directory name.
std::string checkpoint_name(std::int64_t step);

// Writes <dir>/step-XXXXXXXXX atomically (see above), replacing an existing checkpoint of the same step.
// Tensors are copied to the CPU with their dtype. kResource errors (disk full, permissions) leave the
// previous checkpoints untouched and no partial directory behind. Returns the checkpoint's path.
std::filesystem::path save_checkpoint(const std::filesystem::path& dir, const Checkpoint& checkpoint);

struct Verification {
  bool ok = false;
  std::string problem;  // why not: "manifest.json is missing", "state.bin: checksum mismatch", ...
  Manifest manifest;    // as far as it could be read
};

// Checks the manifest (present, parseable, a format version this bellows reads: 1 whole, 2 whole or sharded) and
// every file's size and SHA-256; sharded, also that the shards belong to the manifest's step (check_shards).
Verification verify_checkpoint(const std::filesystem::path& checkpoint);

// Verifies, then reads. kData error naming the checkpoint and the problem when verification fails.
// Tensors come back on the CPU with their saved dtypes; mmap maps model.safetensors (sharded: every shard) instead of
// reading it. A sharded checkpoint comes back whole (ckpt/sharded.h: load_sharded).
Checkpoint load_checkpoint(const std::filesystem::path& checkpoint, bool mmap = false);
Manifest read_manifest(const std::filesystem::path& checkpoint);  // kData error when absent or malformed

// The step-XXXXXXXXX directories under `dir`, oldest step first (not verified).
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);

// The newest checkpoint under `dir` that verifies; each newer one that does not is skipped with a line in
// `skipped` ("step-000000300: state.bin: checksum mismatch"). nullopt when none verifies.
std::optional<std::filesystem::path> find_latest_valid(const std::filesystem::path& dir, std::vector<std::string>* skipped = nullptr);

// Removes all but the newest `keep_last` checkpoints (0: keep all), never the ones in `keep`, and any
// leftover temporary directories of writers that died. Returns what it removed.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& dir, std::int64_t keep_last,
                                                     const std::vector<std::filesystem::path>& keep = {});

}  // namespace bellows::ckpt
