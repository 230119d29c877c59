// The checkpoint directory format; see checkpoint.h.
#include "bellows/ckpt/checkpoint.h"

#include <fmt/format.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <regex>

#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/ckpt/sharded.h"
#include "ckpt/install.h"
#include "bellows/util/atomic_file.h"  // defines: write_file_synced, fsync_directory, rename_durably
#include "bellows/util/check.h"
#include "bellows/version.h"

namespace bellows::ckpt {
namespace fs = std::filesystem;

namespace {

const std::regex kNamePattern("step-([0-9]{9,})");

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::int64_t step_of(const fs::path& p) {
  std::smatch m;
  const std::string name = p.filename().string();
  return std::regex_match(name, m, kNamePattern) ? std::stoll(m[1].str()) : -1;
}

Manifest parse_manifest(const nlohmann::json& j) {
  Manifest m;
  m.format_version = j.at("format_version").get<std::int64_t>();
  m.layout = j.value("layout", std::string("whole"));
  m.world_size = j.value("world_size", std::int64_t{1});
  m.tensors = j.value("tensors", nlohmann::json::object());
  m.bellows_version = j.at("bellows_version").get<std::string>();
  m.torch_version = j.at("torch_version").get<std::string>();
  m.created_utc = j.at("created_utc").get<std::string>();
  m.step = j.at("step").get<std::int64_t>();
  m.epoch = j.at("epoch").get<std::int64_t>();
  m.info = j.at("info");
  for (const auto& [name, f] : j.at("files").items()) m.files[name] = {f.at("sha256").get<std::string>(), f.at("bytes").get<std::uint64_t>()};
  return m;
}

}  // namespace

std::string checkpoint_name(std::int64_t step) { return fmt::format("step-{:09}", step); }

nlohmann::json manifest_json(std::int64_t format_version, const Checkpoint& c, const nlohmann::json& files) {
  return {{"format", "bellows-checkpoint"}, {"format_version", format_version},
          {"bellows_version", BELLOWS_VERSION}, {"torch_version", TORCH_VERSION},
          {"created_utc", utc_now()},          {"step", c.step},
          {"epoch", c.epoch},                  {"info", c.info},
          {"files", files}};
}

std::string temporary_name(const std::string& name, long pid, int n) { return fmt::format(".tmp-{}-{}-{}", name, pid, n); }

void install_checkpoint(const fs::path& tmp, const fs::path& final_path) {
  static std::atomic<int> counter{0};
  // Replacing a checkpoint of the same step: move the old one aside first, so one of them is always whole.
  fs::path old;
  std::error_code ec;
  if (fs::exists(final_path)) {
    old = final_path.parent_path() / fmt::format(".old-{}-{}-{}", final_path.filename().string(), ::getpid(), counter++);
    fs::rename(final_path, old);
  }
  rename_durably(tmp, final_path);
  if (!old.empty()) fs::remove_all(old, ec);
}

fs::path save_checkpoint(const fs::path& dir, const Checkpoint& c) {
  BELLOWS_CHECK(c.step >= 0, fmt::format("checkpoint step {}", c.step), "report this bug");
  std::error_code ec;
  fs::create_directories(dir, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", dir.string(), ec.message()), "check the output directory");
  static std::atomic<int> counter{0};
  const std::string name = checkpoint_name(c.step);
  const fs::path tmp = dir / temporary_name(name, ::getpid(), counter++);
  const fs::path final_path = dir / name;
  try {
    fs::create_directory(tmp);
    // Bytes first (from host memory: tensors already there are not copied again), then files, each fsynced;
    // the manifest last.
    const std::string model = safetensors_bytes(to_host(c.model, /*copy=*/false), {{"format", "pt"}});
    const std::string state = safetensors_bytes(to_host(c.state, /*copy=*/false), {{"format", "bellows-state"}});
    write_file_synced(tmp / kModelFile, model);
    write_file_synced(tmp / kStateFile, state);
    nlohmann::json files = nlohmann::json::object();
    files[kModelFile] = {{"sha256", sha256_hex(model)}, {"bytes", model.size()}};
    files[kStateFile] = {{"sha256", sha256_hex(state)}, {"bytes", state.size()}};
    write_file_synced(tmp / kManifestFile, manifest_json(kFormatVersion, c, files).dump(2) + "\n");
    fsync_directory(tmp);
    install_checkpoint(tmp, final_path);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("writing checkpoint {} failed: {}", final_path.string(), e.what()),
                 "check free disk space and permissions; the previous checkpoints are untouched");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_path;
}

Manifest read_manifest(const fs::path& checkpoint) {
  const fs::path path = checkpoint / kManifestFile;
  BELLOWS_CHECK_DATA(fs::exists(path), fmt::format("{}: {} is missing", checkpoint.string(), kManifestFile),
                     "an incomplete checkpoint (a writer died before finishing it); use another one");
  std::ifstream in(path);
  nlohmann::json j;
  try {
    in >> j;
    BELLOWS_CHECK_DATA(j.value("format", "") == "bellows-checkpoint", fmt::format("{}: not a bellows checkpoint manifest", path.string()),
                       "point --resume at a checkpoint directory (step-XXXXXXXXX)");
    return parse_manifest(j);
  } catch (const nlohmann::json::exception& e) {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: malformed manifest: {}", path.string(), e.what()),
                 "the checkpoint is damaged; use another one");
  }
}

Verification verify_checkpoint(const fs::path& checkpoint) {
  Verification v;
  try {
    v.manifest = read_manifest(checkpoint);
  } catch (const Error& e) {
    v.problem = e.message();
    return v;
  }
  if (v.manifest.format_version < kFormatVersion || v.manifest.format_version > kShardedFormatVersion) {
    v.problem = fmt::format("format version {}: {} (this bellows, {}, reads versions {} and {})", v.manifest.format_version,
                            v.manifest.format_version > kShardedFormatVersion ? "written by a newer bellows" : "not a version bellows wrote",
                            BELLOWS_VERSION, kFormatVersion, kShardedFormatVersion);
    return v;
  }
  const bool sharded = v.manifest.layout == "sharded";
  if (!sharded && v.manifest.layout != "whole") {
    v.problem = fmt::format("layout '{}' (this bellows reads whole and sharded)", v.manifest.layout);
    return v;
  }
  if (sharded && (v.manifest.format_version < kShardedFormatVersion || v.manifest.world_size < 1)) {
    v.problem = fmt::format("a sharded manifest of format version {} and world_size {}", v.manifest.format_version, v.manifest.world_size);
    return v;
  }
  std::vector<std::string> required{kModelFile, kStateFile};
  if (sharded) {
    required.clear();
    for (int r = 0; r < v.manifest.world_size; ++r) required.push_back(shard_file_name(r, static_cast<int>(v.manifest.world_size)));
  }
  for (const std::string& name : required) {
    if (!v.manifest.files.count(name)) {
      v.problem = fmt::format("the manifest lists no {}", name);
      return v;
    }
  }
  for (const auto& [name, expected] : v.manifest.files) {
    const fs::path file = checkpoint / name;
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) {
      v.problem = fmt::format("{} is missing", name);
      return v;
    }
    if (size != expected.second) {
      v.problem = fmt::format("{} has {} bytes, the manifest says {} (truncated?)", name, size, expected.second);
      return v;
    }
    if (sha256_file(file) != expected.first) {
      v.problem = fmt::format("{}: checksum mismatch (SHA-256 differs from the manifest)", name);
      return v;
    }
  }
  if (sharded) {
    v.problem = check_shards(checkpoint, v.manifest);
    if (!v.problem.empty()) return v;
  }
  v.ok = true;
  return v;
}

Checkpoint load_checkpoint(const fs::path& checkpoint, bool mmap) {
  const Verification v = verify_checkpoint(checkpoint);
  BELLOWS_CHECK_DATA(v.ok, fmt::format("checkpoint {} is not usable: {}", checkpoint.string(), v.problem),
                     v.manifest.format_version > kShardedFormatVersion
                         ? fmt::format("read it with the bellows that wrote it ({}), or resume from another checkpoint", v.manifest.bellows_version)
                         : std::string("resume from another checkpoint (--resume auto skips broken ones)"));
  if (v.manifest.layout == "sharded") return load_sharded(checkpoint, v.manifest, mmap);
  Checkpoint c;
  c.step = v.manifest.step;
  c.epoch = v.manifest.epoch;
  c.info = v.manifest.info;
  c.model = read_safetensors(checkpoint / kModelFile, nullptr, mmap);
  c.state = read_safetensors(checkpoint / kStateFile, nullptr, false);
  return c;
}

std::vector<fs::path> list_checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory() && step_of(entry.path()) >= 0) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) < step_of(b); });
  return out;
}

std::optional<fs::path> find_latest_valid(const fs::path& dir, std::vector<std::string>* skipped) {
  const auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const Verification v = verify_checkpoint(*it);
    if (v.ok) return *it;
    if (skipped) skipped->push_back(fmt::format("{}: {}", it->filename().string(), v.problem));
  }
  return std::nullopt;
}

std::vector<fs::path> prune_checkpoints(const fs::path& dir, std::int64_t keep_last, const std::vector<fs::path>& keep) {
  static std::atomic<int> prune_counter{0};
  std::vector<fs::path> removed;
  std::error_code ec;
  auto all = list_checkpoints(dir);
  if (keep_last > 0 && static_cast<std::int64_t>(all.size()) > keep_last) {
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < all.size(); ++i) {
      const bool kept = std::any_of(keep.begin(), keep.end(), [&](const fs::path& k) { return fs::equivalent(k, all[i], ec); });
      if (kept) continue;
      // Out of the way in one atomic (and durable) rename first: a process killed while deleting leaves an
      // .old- directory that the next pruning removes, never a step- directory with some of its files gone.
      const fs::path doomed = dir / fmt::format(".old-{}-{}-{}", all[i].filename().string(), ::getpid(), prune_counter++);
      try {
        rename_durably(all[i], doomed);
      } catch (const Error&) {
        continue;  // cannot rename (permissions): leave it whole rather than half-deleted
      }
      fs::remove_all(doomed, ec);
      removed.push_back(all[i]);
    }
  }
  // Leftovers of writers that died (other processes): temporary and replaced directories.
  const std::string mine = fmt::format("-{}-", ::getpid());
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if ((name.rfind(".tmp-step-", 0) == 0 || name.rfind(".old-step-", 0) == 0) && name.find(mine) == std::string::npos) {
        fs::remove_all(entry.path(), ec);
        removed.push_back(entry.path());
      }
    }
  }
  return removed;
}

}  // namespace bellows::ckpt
