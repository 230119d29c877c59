// The sharded checkpoint layout (checkpoint.layout: sharded; docs/architecture.md, "Files on disk"): each rank of a
// job writes what it holds, in parallel, and rank 0 one manifest that names every tensor and every file.
//
//   <checkpoints>/step-000001234/
//     shard-00000-of-00002.safetensors  rank 0's tensors: "model/<name>" (weights and buffers), "state/<key>" (the
//     shard-00001-of-00002.safetensors  trainer state: optimizer entries, EMA, ...; "state/rank.<r>.<key>": what is
//                                       rank r's own, its RNG states and its loader's position); safetensors metadata
//                                       "step", "rank", "world_size"
//     manifest.json                     format_version 2, "layout": "sharded", "world_size", every tensor's dtype,
//                                       shape and file ("tensors"), every file's SHA-256 and size ("files")
//
// Parts are whole tensors: every strategy gives each tensor one owner (dist::Strategy::owners), and the owner writes
// it; a reader of any world size takes each tensor from the file that holds it.
//
// Written atomically as a whole layout's checkpoint is: rank 0 makes the temporary directory, every rank writes its
// shard there (fsynced, with a small sidecar of its checksum), rank 0 writes the manifest, fsyncs the directory and
// renames it into place. A rank that fails makes every rank fail (one sum over the ranks after each stage), and
// nothing but the temporary directory, which the next pruning removes, is left behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "bellows/ckpt/checkpoint.h"  // defines: Checkpoint

namespace bellows::ckpt {

inline constexpr std::int64_t kShardedFormatVersion = 2;

// "shard-00001-of-00004.safetensors"
std::string shard_file_name(int rank, int world_size);

// The ranks of one job writing together. `sum`: an integer of every rank added up, on every rank (an all-reduce;
// the identity for one process): the writers' one way to agree.
struct ShardWriters {
  int rank = 0;
  int world_size = 1;
  std::function<std::int64_t(std::int64_t)> sum = [](std::int64_t x) { return x; };
};

// Every rank calls it at the same step with its share (`share.model`, `share.state`; rank 0's `step`, `epoch` and
// `info` go into the manifest). Writes <dir>/step-XXXXXXXXX; replaces one of the same step. kResource errors on every
// rank when any rank failed (naming the failing rank's reason on that rank). Returns the checkpoint's path.
std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& dir, const Checkpoint& share, const ShardWriters& writers);

// For a verified sharded checkpoint: its tensors as the whole layout holds them, "model" and "state" (the per-rank
// entries keep their "rank.<r>." names). mmap: the tensors view the mapped shards (read-only; pages are read when
// touched, so a reader touching its own share reads only that).
Checkpoint load_sharded(const std::filesystem::path& checkpoint, const Manifest& manifest, bool mmap);

// The sharded layout's checks beyond the files' checksums: every shard names the manifest's step and world size, and
// every tensor the manifest lists is in the file it names with its dtype and shape. "" when they hold.
std::string check_shards(const std::filesystem::path& checkpoint, const Manifest& manifest);

}  // namespace bellows::ckpt
