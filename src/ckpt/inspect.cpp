// Checkpoint inspection and export; see inspect.h.
#include "bellows/ckpt/inspect.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/ckpt/sharded.h"
#include "bellows/util/check.h"

namespace bellows::ckpt {
namespace fs = std::filesystem;

namespace {

// A file of a verified checkpoint that holds tensors, with its header; `rank`: the rank that wrote it (sharded), or -1.
struct TensorFile {
  std::string name;
  int rank = -1;
  fs::path path;
  SafetensorsHeader header;
};

// Where one tensor lies: its file (an index into Parts::files) and its place there.
struct Part {
  std::size_t file;
  TensorInfo info;
};

// Every tensor of a verified checkpoint by where it lies, without its data: "model" by the model's names, "state" by
// the trainer state's keys, both layouts alike. Reading a tensor reads its bytes alone (read_part).
struct Parts {
  std::vector<TensorFile> files;
  std::map<std::string, Part> model, state;
};

Parts parts_of(const fs::path& checkpoint, const Manifest& m) {
  Parts p;
  auto add_file = [&](const std::string& name, int rank) {
    p.files.push_back({name, rank, checkpoint / name, read_safetensors_header(checkpoint / name)});
    return p.files.size() - 1;
  };
  if (m.layout != "sharded") {
    for (const auto& [name, space] : {std::pair{kModelFile, &p.model}, std::pair{kStateFile, &p.state}}) {
      const std::size_t f = add_file(name, -1);
      for (const TensorInfo& t : p.files[f].header.tensors) space->emplace(t.name, Part{f, t});
    }
    return p;
  }
  // Sharded: the manifest says which shard holds each tensor (check_shards verified that it does), stored there as
  // "<space>/<name>".
  std::map<std::string, std::size_t> by_name;
  for (int r = 0; r < m.world_size; ++r) {
    const std::string shard = shard_file_name(r, static_cast<int>(m.world_size));
    by_name[shard] = add_file(shard, r);
  }
  for (const auto& [space_name, space] : {std::pair{"model", &p.model}, std::pair{"state", &p.state}}) {
    for (const auto& [key, t] : m.tensors.at(space_name).items()) {
      const std::size_t f = by_name.at(t.at("file").get<std::string>());
      const std::string stored = std::string(space_name) + "/" + key;
      const auto& tensors = p.files[f].header.tensors;
      const auto it =
          std::find_if(tensors.begin(), tensors.end(), [&](const TensorInfo& i) { return i.name == stored; });
      BELLOWS_CHECK_DATA(
          it != tensors.end(),
          fmt::format("{}: {} {} is missing (the manifest puts it there)", p.files[f].path.string(), space_name, key),
          "the checkpoint changed since it was verified; inspect it again");
      TensorInfo info = *it;
      info.name = key;
      space->emplace(key, Part{f, std::move(info)});
    }
  }
  return p;
}

// One tensor's data, read alone from its file.
at::Tensor read_part(const Parts& p, const Part& part) {
  const TensorFile& f = p.files[part.file];
  return read_safetensors_tensor(f.path, f.header, part.info);
}

// The first 16 hex digits of the SHA-256 of a tensor's bytes (C order): equal digests, equal contents.
std::string digest(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return sha256_hex(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes())).substr(0, 16);
}

// Name, dtype, shape, digest (and, sharded, the file and the rank that wrote it) of each tensor, read one at a time.
nlohmann::json tensor_list(const Parts& p, const std::map<std::string, Part>& parts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, part] : parts) {
    nlohmann::json t = {{"name", name},
                        {"dtype", safetensors_dtype_name(part.info.dtype)},
                        {"shape", part.info.shape},
                        {"digest", digest(read_part(p, part))}};
    const TensorFile& f = p.files[part.file];
    if (f.rank >= 0) {
      t["file"] = f.name;
      t["rank"] = f.rank;
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The trainer's counters ("counters.<name>", 0-dim), shown as they are: a whole number, or (in a state not written by
// bellows) whatever value it holds; NaN as null.
nlohmann::json counters(const Parts& p) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, part] : p.state) {
    if (name.rfind("counters.", 0) != 0 || !part.info.shape.empty()) continue;
    const double v = read_part(p, part).item<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18) {
      out[name.substr(9)] = static_cast<std::int64_t>(v);
    } else {
      out[name.substr(9)] = v;
    }
  }
  return out;
}

}  // namespace

fs::path resolve_checkpoint(const fs::path& path) {
  BELLOWS_CHECK_DATA(fs::exists(path), fmt::format("{} does not exist", path.string()), "give a checkpoint directory (step-XXXXXXXXX)");
  if (fs::exists(path / kManifestFile)) return path;
  for (const fs::path& dir : {path, path / "checkpoints"}) {
    if (list_checkpoints(dir).empty()) continue;
    std::vector<std::string> skipped;
    const auto latest = find_latest_valid(dir, &skipped);
    BELLOWS_CHECK_DATA(latest.has_value(),
                       fmt::format("{} holds checkpoints, but none verifies: {}", dir.string(), fmt::join(skipped, "; ")),
                       "the checkpoints are damaged or incomplete");
    return *latest;
  }
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{} is neither a checkpoint (no {}) nor a directory of checkpoints", path.string(), kManifestFile),
               "give a step-XXXXXXXXX directory, the checkpoints/ directory or the run directory");
}

nlohmann::json inspect_checkpoint(const fs::path& checkpoint) {
  const Verification v = verify_checkpoint(checkpoint);
  nlohmann::json j;
  j["path"] = checkpoint.string();
  j["valid"] = v.ok;
  j["problem"] = v.problem;
  const Manifest& m = v.manifest;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"sha256", f.first}, {"bytes", f.second}};
  j["manifest"] = {{"format_version", m.format_version}, {"bellows_version", m.bellows_version}, {"torch_version", m.torch_version},
                   {"created_utc", m.created_utc},       {"step", m.step},                     {"epoch", m.epoch},
                   {"info", m.info},                     {"files", files}};
  if (m.layout == "sharded") {
    j["manifest"]["layout"] = m.layout;
    j["manifest"]["world_size"] = m.world_size;
  }
  j["model"] = nlohmann::json::array();
  j["state"] = nlohmann::json::array();
  j["counters"] = nlohmann::json::object();
  if (!v.ok) return j;
  const Parts p = parts_of(checkpoint, m);
  j["model"] = tensor_list(p, p.model);
  j["state"] = tensor_list(p, p.state);
  j["counters"] = counters(p);
  return j;
}

std::string format_inspection(const nlohmann::json& j) {
  std::string out = fmt::format("checkpoint {}\n", j["path"].get<std::string>());
  const auto& m = j["manifest"];
  out += j["valid"].get<bool>() ? "  checksums: ok (every file matches its SHA-256 in the manifest)\n"
                                : fmt::format("  NOT USABLE: {}\n", j["problem"].get<std::string>());
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  out += fmt::format("  step {} epoch {}; written {} by bellows {} with LibTorch {} (format {})\n", text(m["step"]), text(m["epoch"]),
                     text(m["created_utc"]), text(m["bellows_version"]), text(m["torch_version"]), text(m["format_version"]));
  if (m.contains("layout")) {
    out += fmt::format("  layout {}: {} rank(s) wrote it, a shard each\n", text(m["layout"]), text(m["world_size"]));
  }
  std::size_t width = 18;  // the whole layout's file names; a shard's are longer
  for (const auto& [name, f] : m["files"].items()) width = std::max(width, name.size());
  for (const auto& [name, f] : m["files"].items()) {
    out += fmt::format("  {:<{}} {:>12} bytes  sha256 {}\n", name, width, f["bytes"].dump(),
                       f["sha256"].get<std::string>());
  }
  if (!j["counters"].empty()) {
    out += "  counters:";
    for (const auto& [name, v] : j["counters"].items()) out += fmt::format(" {}={}", name, v.dump());
    out += "\n";
  }
  if (m["info"].is_object()) {
    for (const auto& [key, v] : m["info"].items()) {
      const std::string text = v.is_string() ? v.get<std::string>() : std::string();
      if (text.find('\n') != std::string::npos) {
        out += fmt::format("  {}: ({} lines; --json shows it)\n", key, std::count(text.begin(), text.end(), '\n'));
      } else {
        out += fmt::format("  {}: {}\n", key, v.dump());
      }
    }
  }
  for (const char* section : {"model", "state"}) {
    if (j[section].empty()) continue;
    out += fmt::format("  {} tensors ({}):\n", section, j[section].size());
    // Sharded, the shapes are padded to one width, so that the shard column lines up.
    auto shape = [](const nlohmann::json& t) {
      return fmt::format("[{}]", fmt::join(t["shape"].get<std::vector<std::int64_t>>(), ", "));
    };
    std::size_t width = 0;
    for (const auto& t : j[section]) width = t.contains("file") ? std::max(width, shape(t).size()) : 0;
    for (const auto& t : j[section]) {
      out += fmt::format("    {:<40} {:<5} {:<{}}  {}", t["name"].get<std::string>(), t["dtype"].get<std::string>(),
                         shape(t), width, t["digest"].get<std::string>());
      out += t.contains("file") ? fmt::format("  in {} (rank {})\n", t["file"].get<std::string>(), t["rank"].dump())
                                : "\n";
    }
  }
  return out;
}

std::size_t export_weights(const fs::path& checkpoint, const fs::path& to, bool ema) {
  const Verification v = verify_checkpoint(checkpoint);
  BELLOWS_CHECK_DATA(v.ok, fmt::format("checkpoint {} is not usable: {}", checkpoint.string(), v.problem),
                     v.manifest.format_version > kShardedFormatVersion
                         ? fmt::format("export it with the bellows that wrote it ({}), or export another checkpoint",
                                       v.manifest.bellows_version)
                         : "export another checkpoint (a directory of checkpoints gives the newest valid one)");
  const Parts p = parts_of(checkpoint, v.manifest);
  // Each of the model's tensors from where it lies (ema: its average, "ema.weights.<name>", where there is one).
  std::map<std::string, const Part*> source;
  std::size_t replaced = 0;
  for (const auto& [name, part] : p.model) {
    const auto average = ema ? p.state.find("ema.weights." + name) : p.state.end();
    replaced += average != p.state.end();
    source.emplace(name, average != p.state.end() ? &average->second : &part);
  }
  BELLOWS_CHECK_DATA(!ema || replaced > 0, fmt::format("{} has no EMA weights", checkpoint.string()),
                     "train with ema.enabled: true, or export without --ema");
  std::vector<TensorSpec> specs;
  for (const auto& [name, part] : source) specs.push_back({name, part->info.dtype, part->info.shape});
  // Streamed (one tensor in memory at a time), durable and atomic (util/atomic_file.h: temporary file, fsync, rename).
  write_safetensors_streamed(
      to, specs,
      {{"format", "pt"}, {"bellows_step", std::to_string(v.manifest.step)}, {"weights", ema ? "ema" : "raw"}},
      [&](const TensorSpec& s) { return read_part(p, *source.at(s.name)); });
  return specs.size();
}

}  // namespace bellows::ckpt
