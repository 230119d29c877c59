// Checkpoint inspection and export; see inspect.h.
#include "bellows/ckpt/inspect.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <fmt/ranges.h>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/util/check.h"

namespace bellows::ckpt {
namespace fs = std::filesystem;

namespace {

// The first 16 hex digits of the SHA-256 of a tensor's bytes (C order): equal digests, equal contents.
std::string digest(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return sha256_hex(std::string_view(static_cast<const char*>(c.data_ptr()), c.nbytes())).substr(0, 16);
}

nlohmann::json tensor_list(const std::map<std::string, at::Tensor>& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, t] : tensors) {
    out.push_back({{"name", name}, {"dtype", safetensors_dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}, {"digest", digest(t)}});
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
  j["model"] = nlohmann::json::array();
  j["state"] = nlohmann::json::array();
  j["counters"] = nlohmann::json::object();
  if (!v.ok) return j;
  const Checkpoint c = load_checkpoint(checkpoint, /*mmap=*/true);
  j["model"] = tensor_list(c.model);
  j["state"] = tensor_list(c.state);
  for (const auto& [name, t] : c.state) {
    if (name.rfind("counters.", 0) == 0 && t.dim() == 0) {
      // Shown as they are: a whole number, or (in a state not written by bellows) whatever value it holds; NaN as null.
      const double v = t.item<double>();
      if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18) {
        j["counters"][name.substr(9)] = static_cast<std::int64_t>(v);
      } else {
        j["counters"][name.substr(9)] = v;
      }
    }
  }
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
  for (const auto& [name, f] : m["files"].items()) out += fmt::format("  {:<18} {:>12} bytes  sha256 {}\n", name, f["bytes"].dump(), f["sha256"].get<std::string>());
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
    for (const auto& t : j[section]) {
      out += fmt::format("    {:<40} {:<5} [{}]  {}\n", t["name"].get<std::string>(), t["dtype"].get<std::string>(),
                         fmt::join(t["shape"].get<std::vector<std::int64_t>>(), ", "), t["digest"].get<std::string>());
    }
  }
  return out;
}

std::size_t export_weights(const fs::path& checkpoint, const fs::path& to, bool ema) {
  const Checkpoint c = load_checkpoint(checkpoint, /*mmap=*/true);
  std::map<std::string, at::Tensor> weights = c.model;
  if (ema) {
    std::size_t replaced = 0;
    for (auto& [name, t] : weights) {
      auto it = c.state.find("ema.weights." + name);
      if (it == c.state.end()) continue;
      t = it->second;
      ++replaced;
    }
    BELLOWS_CHECK_DATA(replaced > 0, fmt::format("{} has no EMA weights", checkpoint.string()),
                       "train with ema.enabled: true, or export without --ema");
  }
  // Durable and atomic (temporary file, fsync, rename): write_safetensors writes through util/atomic_file.h.
  write_safetensors(to, weights, {{"format", "pt"}, {"bellows_step", std::to_string(c.step)}, {"weights", ema ? "ema" : "raw"}});
  return weights.size();
}

}  // namespace bellows::ckpt
