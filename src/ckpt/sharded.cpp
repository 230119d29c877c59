// The sharded checkpoint layout; see sharded.h.
#include "bellows/ckpt/sharded.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <fstream>
#include <map>

#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/util/atomic_file.h"  // defines: write_file_atomically, fsync_directory
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "ckpt/install.h"

namespace bellows::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelSpace = "model/";
constexpr const char* kStateSpace = "state/";

fs::path sidecar_of(const fs::path& shard) { return fs::path(shard).replace_extension(".json"); }

// A stage every rank went through: the number of ranks that failed it, on every rank; the ones that did not fail
// throw too, naming the others.
void agree_or_fail(const ShardWriters& w, std::exception_ptr mine, const std::string& stage, const fs::path& path) {
  const std::int64_t failed = w.sum(mine ? 1 : 0);
  if (mine) std::rethrow_exception(mine);
  BELLOWS_CHECK_RESOURCE(failed == 0,
                         fmt::format("writing checkpoint {} failed: {} of {} rank(s) could not {} (their own errors name why)",
                                     path.string(), failed, w.world_size, stage),
                         "check free disk space and permissions on every node; the previous checkpoints are untouched");
}

// A filesystem error while writing the checkpoint at `final_path` (`where`: " on rank N" or ""), as a kResource error.
std::exception_ptr shard_write_failure(const fs::path& final_path, const std::string& where, const fs::filesystem_error& e) {
  return std::make_exception_ptr(Error(ErrorKind::kResource, fmt::format("writing checkpoint {} failed{}: {}", final_path.string(), where, e.what()),
                                       "check free disk space and permissions; the previous checkpoints are untouched"));
}

// Rank 0's part: the checkpoint directory and the temporary directory in it. Sets `id` (rank 0's pid and count, as one
// number); returns the failure, if any.
std::exception_ptr make_shard_directory(const fs::path& dir, const std::string& name, const fs::path& final_path, std::int64_t& id) {
  static std::atomic<int> counter{0};
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", dir.string(), ec.message()), "check the output directory");
    id = (static_cast<std::int64_t>(::getpid()) << 20) | (counter++ & 0xFFFFF);
    fs::create_directory(dir / temporary_name(name, static_cast<long>(id >> 20), static_cast<int>(id & 0xFFFFF)));
  } catch (const fs::filesystem_error& e) {
    return shard_write_failure(final_path, "", e);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// --- rank 0 makes the temporary directory; every rank learns its name (rank 0's pid and count, as one number) ---
fs::path agree_on_shard_directory(const fs::path& dir, const std::string& name, const fs::path& final_path, const ShardWriters& w) {
  std::exception_ptr failure;
  std::int64_t id = 0;
  if (w.rank == 0) failure = make_shard_directory(dir, name, final_path, id);
  id = w.sum(failure ? -1 : id);
  if (failure) std::rethrow_exception(failure);
  BELLOWS_CHECK_RESOURCE(id > 0, fmt::format("writing checkpoint {} failed: rank 0 could not create its directory", final_path.string()),
                         "rank 0's error names why; the previous checkpoints are untouched");
  return dir / temporary_name(name, static_cast<long>(id >> 20), static_cast<int>(id & 0xFFFFF));
}

// --- every rank: its shard and the shard's checksum beside it; returns the failure, if any ---
std::exception_ptr write_own_shard(const fs::path& tmp, const fs::path& final_path, const Checkpoint& share, const ShardWriters& w) {
  const std::string file = shard_file_name(w.rank, w.world_size);
  try {
    std::map<std::string, at::Tensor> tensors;
    for (const auto& [n, t] : share.model) tensors.emplace(kModelSpace + n, t);
    for (const auto& [n, t] : share.state) tensors.emplace(kStateSpace + n, t);
    write_safetensors(tmp / file, tensors,
                      {{"format", "bellows-shard"}, {"step", std::to_string(share.step)}, {"rank", std::to_string(w.rank)},
                       {"world_size", std::to_string(w.world_size)}});
    const nlohmann::json sidecar = {{"sha256", sha256_file(tmp / file)}, {"bytes", fs::file_size(tmp / file)}, {"step", share.step}};
    write_file_atomically(sidecar_of(tmp / file), sidecar.dump());
  } catch (const fs::filesystem_error& e) {
    return shard_write_failure(final_path, fmt::format(" on rank {}", w.rank), e);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// The manifest's "files" (checksums, from the sidecars, which are removed) and "tensors" (from the shards' headers).
struct ShardListing {
  nlohmann::json files = nlohmann::json::object();
  nlohmann::json tensors = {{"model", nlohmann::json::object()}, {"state", nlohmann::json::object()}};
};

ShardListing list_written_shards(const fs::path& tmp, const Checkpoint& share, const ShardWriters& w) {
  ShardListing listing;
  for (int r = 0; r < w.world_size; ++r) {
    const std::string f = shard_file_name(r, w.world_size);
    std::ifstream in(sidecar_of(tmp / f));
    const nlohmann::json side = nlohmann::json::parse(in);
    BELLOWS_CHECK_RESOURCE(side.at("step").get<std::int64_t>() == share.step,
                           fmt::format("{}: rank {} wrote step {}, rank 0 step {}", (tmp / f).string(), r, side.at("step").dump(), share.step),
                           "the ranks disagree on the step: report this bug");
    listing.files[f] = {{"sha256", side.at("sha256")}, {"bytes", side.at("bytes")}};
    for (const TensorInfo& t : read_safetensors_header(tmp / f).tensors) {
      const bool model = t.name.rfind(kModelSpace, 0) == 0;
      const std::string key = t.name.substr(model ? std::string(kModelSpace).size() : std::string(kStateSpace).size());
      listing.tensors[model ? "model" : "state"][key] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"file", f}};
    }
    fs::remove(sidecar_of(tmp / f));
  }
  return listing;
}

void write_shard_manifest_and_install(const fs::path& tmp, const fs::path& final_path, const Checkpoint& share, const ShardWriters& w) {
  ShardListing listing = list_written_shards(tmp, share, w);
  nlohmann::json manifest = manifest_json(kShardedFormatVersion, share, listing.files);
  manifest["layout"] = "sharded";
  manifest["world_size"] = w.world_size;
  manifest["tensors"] = std::move(listing.tensors);
  write_file_synced(tmp / kManifestFile, manifest.dump(2) + "\n");
  fsync_directory(tmp);
  install_checkpoint(tmp, final_path);
}

// --- rank 0: the manifest from the sidecars and the shards' headers, then the directory into place; returns the
// failure, if any (the temporary directory is then removed) ---
std::exception_ptr finish_sharded_checkpoint(const fs::path& tmp, const fs::path& final_path, const Checkpoint& share, const ShardWriters& w) {
  std::exception_ptr failure;
  try {
    write_shard_manifest_and_install(tmp, final_path, share, w);
  } catch (const fs::filesystem_error& e) {
    failure = shard_write_failure(final_path, "", e);
  } catch (const nlohmann::json::exception& e) {
    failure = std::make_exception_ptr(Error(ErrorKind::kResource, fmt::format("writing checkpoint {} failed: a shard's sidecar: {}", final_path.string(), e.what()),
                                            "a rank's file was changed while the checkpoint was written; the previous checkpoints are untouched"));
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  return failure;
}

}  // namespace

std::string shard_file_name(int rank, int world_size) { return fmt::format("shard-{:05}-of-{:05}.safetensors", rank, world_size); }

fs::path save_sharded_checkpoint(const fs::path& dir, const Checkpoint& share, const ShardWriters& w) {
  BELLOWS_CHECK(share.step >= 0 && w.rank >= 0 && w.rank < w.world_size,
                fmt::format("sharded checkpoint of step {} by rank {} of {}", share.step, w.rank, w.world_size), "report this bug");
  const std::string name = checkpoint_name(share.step);
  const fs::path final_path = dir / name;
  const fs::path tmp = agree_on_shard_directory(dir, name, final_path, w);
  agree_or_fail(w, write_own_shard(tmp, final_path, share, w), "write their shard", final_path);
  const std::exception_ptr failure = w.rank == 0 ? finish_sharded_checkpoint(tmp, final_path, share, w) : nullptr;
  agree_or_fail(w, failure, "finish the manifest", final_path);
  return final_path;
}

std::string check_shards(const fs::path& checkpoint, const Manifest& m) {
  const std::string world = std::to_string(m.world_size);
  std::map<std::string, SafetensorsHeader> headers;
  for (int r = 0; r < m.world_size; ++r) {
    const std::string f = shard_file_name(r, static_cast<int>(m.world_size));
    try {
      headers[f] = read_safetensors_header(checkpoint / f);
    } catch (const Error& e) {
      return fmt::format("{}: {}", f, e.message());
    }
    const auto& meta = headers[f].metadata;
    const auto step = meta.find("step");
    if (step == meta.end() || step->second != std::to_string(m.step)) {
      return fmt::format("{} belongs to step {}, the manifest to step {} (shards of two checkpoints mixed)", f,
                         step == meta.end() ? std::string("(none)") : step->second, m.step);
    }
    const auto ws = meta.find("world_size");
    if (ws == meta.end() || ws->second != world) {
      return fmt::format("{} was written by a job of {} ranks, the manifest says {}", f, ws == meta.end() ? std::string("(none)") : ws->second, world);
    }
  }
  for (const char* space : {"model", "state"}) {
    if (!m.tensors.contains(space)) return fmt::format("the manifest's tensors list no \"{}\"", space);
    for (const auto& [key, t] : m.tensors[space].items()) {
      const std::string f = t.value("file", "");
      const auto h = headers.find(f);
      if (h == headers.end()) return fmt::format("the manifest puts {} {} in {}, which is not one of its shards", space, key, f.empty() ? "(no file)" : f);
      const std::string stored = std::string(space) + "/" + key;
      const auto it = std::find_if(h->second.tensors.begin(), h->second.tensors.end(), [&](const TensorInfo& i) { return i.name == stored; });
      if (it == h->second.tensors.end()) return fmt::format("{}: {} {} is missing (the manifest puts it there)", f, space, key);
      if (t.value("shape", std::vector<std::int64_t>{}) != it->shape || t.value("dtype", "") != safetensors_dtype_name(it->dtype)) {
        return fmt::format("{}: {} {} has another dtype or shape than the manifest says", f, space, key);
      }
    }
  }
  return "";
}

Checkpoint load_sharded(const fs::path& checkpoint, const Manifest& m, bool mmap) {
  Checkpoint c;
  c.step = m.step;
  c.epoch = m.epoch;
  c.info = m.info;
  c.layout = "sharded";
  c.world_size = m.world_size;
  for (int r = 0; r < m.world_size; ++r) {
    for (auto& [name, t] : read_safetensors(checkpoint / shard_file_name(r, static_cast<int>(m.world_size)), nullptr, mmap)) {
      const bool model = name.rfind(kModelSpace, 0) == 0;
      (model ? c.model : c.state).emplace(name.substr(model ? std::string(kModelSpace).size() : std::string(kStateSpace).size()), t);
    }
  }
  return c;
}

}  // namespace bellows::ckpt
