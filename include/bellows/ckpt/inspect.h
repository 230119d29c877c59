// What `bellows ckpt inspect` and `bellows ckpt export` do, as library calls: a checkpoint described (files
// and whether their checksums hold, versions, counters, config, and every tensor with dtype, shape and a
// content digest; sharded, also the layout, the world size and each tensor's shard and the rank that wrote it), and
// its weights written as one standalone safetensors file. Both layouts (ckpt/checkpoint.h, ckpt/sharded.h) are read
// tensor by tensor: neither call holds more than one tensor in memory.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace bellows::ckpt {

// `path` is a checkpoint directory, or a directory holding step-XXXXXXXXX checkpoints (or a run directory
// with checkpoints/): then the newest valid one. kData error when there is none.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// The description as JSON: {"path", "valid", "problem", "manifest": {...}, "model": [{name, dtype, shape,
// digest}], "state": [...], "counters": {...}}. Tensors are listed only when the checkpoint verifies. Sharded, the
// manifest adds "layout" and "world_size", and each tensor "file" (its shard) and "rank" (the rank that wrote it).
nlohmann::json inspect_checkpoint(const std::filesystem::path& checkpoint);
std::string format_inspection(const nlohmann::json& inspection);  // for the terminal

// Writes the checkpoint's weights (ema: the EMA weights where the checkpoint has them) to `to` under the model's names
// (Python's state_dict names), atomically (temporary file, fsync, rename) and streamed: each tensor is read from the
// file that holds it (a sharded checkpoint's shard) and written before the next is read. The same weights give the
// same file from either layout. kData errors for a checkpoint that does not verify, or ema without EMA weights.
// Returns the number of tensors written.
std::size_t export_weights(const std::filesystem::path& checkpoint, const std::filesystem::path& to, bool ema);

}  // namespace bellows::ckpt
