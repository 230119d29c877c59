// Hardware profiles; see profiles.h.
#include "bellows/app/profiles.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>

#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string closest_hint(const std::string& value) {
  return fmt::format("use auto, none, one of: {}; or a path to a profile file (containing '/' or ending in .yaml)",
                     fmt::join(profile_names(), ", "));
}

}  // namespace

fs::path profiles_dir() {
  if (const char* env = std::getenv("BELLOWS_PROFILES_DIR"); env != nullptr && *env != '\0') {
    BELLOWS_CHECK_CONFIG(fs::is_directory(env), fmt::format("BELLOWS_PROFILES_DIR is '{}', which is not a directory", env),
                         "point it at a directory of profile files, or unset it to use the shipped ones");
    return env;
  }
  Dl_info self{};
  BELLOWS_CHECK(::dladdr(reinterpret_cast<const void*>(&profiles_dir), &self) != 0 && self.dli_fname != nullptr,
                "cannot find the file libbellows was loaded from", "report this bug");
  const fs::path dir = fs::path(self.dli_fname).parent_path().parent_path() / "share" / "bellows" / "profiles";
  BELLOWS_CHECK_RESOURCE(fs::is_directory(dir), fmt::format("the hardware profiles are not installed: {} does not exist", dir.string()),
                         "install bellows (cmake --install), set BELLOWS_PROFILES_DIR to the source tree's profiles/, or run "
                         "with hardware_profile=none");
  return dir;
}

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(profiles_dir(), ec)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ProfileSelection auto_profile(const hw::HardwareInfo& hw) {
  const hw::GpuInfo* gpu = hw::first_supported_gpu(hw.cuda);
  if (gpu == nullptr) {
    const std::string why = !hw.cuda.reason.empty() ? hw.cuda.reason
                            : hw.cuda.usable      ? "LibTorch has no kernels for the GPUs here"
                                                  : "no usable GPU";
    return {"cpu", {}, fmt::format("auto: no usable GPU ({})", why)};
  }
  const double gib = static_cast<double>(gpu->total_memory_bytes) / kGiB;
  const std::string what = fmt::format("{} with {:.1f} GiB, compute capability {}.{}", gpu->name, gib, gpu->cc_major, gpu->cc_minor);
  std::string name;
  if (gpu->cc_major >= 9) name = "hopper";
  else if (gib < 16) name = "gpu-12gb";
  else if (gib < 32) name = "gpu-24gb";
  else if (gib < 64) name = "gpu-48gb";
  else name = "gpu-80gb";
  const std::string rule = gpu->cc_major >= 9 ? "compute capability 9.0 or newer" : fmt::format("by its memory ({} GiB class)", name.substr(4, 2));
  return {name, {}, fmt::format("auto: GPU {}, {}: {}", gpu->index, what, rule)};
}

ProfileSelection select_profile(const std::string& value, const hw::HardwareInfo& hw) {
  if (value == "none") return {"none", {}, "none"};
  ProfileSelection s = value == "auto" ? auto_profile(hw) : ProfileSelection{value, {}, ""};
  const std::vector<std::string> names = profile_names();
  BELLOWS_CHECK_CONFIG(std::find(names.begin(), names.end(), s.name) != names.end(),
                       fmt::format("hardware_profile '{}' is not a shipped profile (in {})", s.name, profiles_dir().string()),
                       closest_hint(s.name));
  s.file = profiles_dir() / (s.name + ".yaml");
  return s;
}

config::ProfileResolver profile_resolver(const hw::HardwareInfo& hw, std::optional<std::string> forced) {
  return [&hw, forced](const std::string& value, const config::Origin& where) -> std::optional<fs::path> {
    const std::string chosen = forced.value_or(value);
    if (config::is_profile_path(chosen)) {  // a file: the config's, relative to it; the command line's, to the working directory
      if (!forced) return std::nullopt;
      return fs::absolute(chosen);
    }
    try {
      return select_profile(chosen, hw).file;
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("{}: {}", forced ? std::string("command line") : where.str(), e.message()), e.hint());
    }
  };
}

std::optional<std::string> take_profile_argument(std::vector<std::string>& args) {
  std::optional<std::string> value;
  std::vector<std::string> rest;
  constexpr std::string_view kKey = "hardware_profile=", kFlag = "--hardware-profile", kFlagEq = "--hardware-profile=";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind(kKey, 0) == 0) {
      value = a.substr(kKey.size());
    } else if (a.rfind(kFlagEq, 0) == 0) {
      value = a.substr(kFlagEq.size());
    } else if (a == kFlag) {
      BELLOWS_CHECK_USAGE(i + 1 < args.size(), "--hardware-profile needs a value", "write --hardware-profile NAME (auto, none, cpu, gpu-24gb, ...)");
      value = args[++i];
    } else {
      rest.push_back(a);
    }
  }
  BELLOWS_CHECK_USAGE(!value || !value->empty(), "hardware_profile= needs a value", "write hardware_profile=NAME (auto, none, cpu, gpu-24gb, ...)");
  args = std::move(rest);
  return value;
}

void compose_default_profile(config::Config& c, const hw::HardwareInfo& hw, const std::optional<std::string>& forced) {
  const std::string value = forced.value_or("auto");
  const config::Origin origin = forced ? config::Origin::noted(fmt::format("command line 'hardware_profile={}'", value))
                                       : config::Origin::noted("default (hardware_profile: auto)");
  if (const auto& named = c.hardware_profile()) {  // a file named one; the resolver gave a forced one its place
    if (forced) c.record_hardware_profile(config::ProfileChoice{value, origin, named->file});
    return;
  }
  fs::path file;
  if (forced && config::is_profile_path(value)) {
    file = fs::absolute(value);
  } else {
    try {
      file = select_profile(value, hw).file;
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("{}: {}", forced ? "command line" : "hardware_profile: auto", e.message()), e.hint());
    }
  }
  const config::Config profile = file.empty() ? config::Config() : config::Config::load(file);
  c.compose_profile_below(profile, config::ProfileChoice{value, origin, file});
}

plan::PlanEntry profile_plan_entry(const config::Config& c, const hw::HardwareInfo& hw) {
  const auto& choice = c.hardware_profile();
  if (!choice) return {"profile", "none", "no profile composed (a config built in code)"};
  if (choice->file.empty()) return {"profile", "none", fmt::format("requested ({})", choice->origin.str())};
  const std::string name = choice->file.stem().string();
  if (choice->value == "auto") return {"profile", name, auto_profile(hw).reason};
  return {"profile", config::is_profile_path(choice->value) ? choice->file.string() : name,
          fmt::format("requested ({})", choice->origin.str())};
}

}  // namespace bellows::app
