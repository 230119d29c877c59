// Hardware profiles: YAML files shipped in profiles/ (installed into <prefix>/share/bellows/profiles), one per
// class of machine, each key with a comment saying why. A run config's `hardware_profile:` is `auto` (the default:
// chosen from the hardware report), the name of a shipped profile, `none`, or a path to a file of one's own.
// A profile's keys are defaults: experiment < hardware profile < the config file's own keys < command line
// (a profile that no file names, the default `auto` or the command line's `hardware_profile=NAME`, sits below
// every key of the config). The plan table's first row says which profile was composed and why.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bellows/config/config.h"     // defines: Config, ProfileResolver, ProfileChoice
#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/plan/plan.h"         // defines: PlanEntry

namespace bellows::app {

// Where the shipped profiles are: $BELLOWS_PROFILES_DIR when set, else share/bellows/profiles beside the
// directory libbellows was loaded from (an installation's lib/, the build tree's src/). kResource error when
// there is none.
std::filesystem::path profiles_dir();

// The shipped profiles' names (cpu, gpu-12gb, gpu-24gb, gpu-48gb, gpu-80gb, hopper), sorted.
std::vector<std::string> profile_names();

struct ProfileSelection {
  std::string name;            // the profile, or "none"
  std::filesystem::path file;  // empty for none
  std::string reason;          // "auto: no usable GPU (...)", "auto: NVIDIA H100 ..., compute capability 9.0"
};

// The profile `auto` chooses: cpu without a usable GPU; by the first usable GPU otherwise: hopper for compute
// capability 9.0 and up, else by its memory: gpu-12gb below 16 GiB, gpu-24gb below 32, gpu-48gb below 64, gpu-80gb.
ProfileSelection auto_profile(const hw::HardwareInfo& hw);

// `value`: auto, none, or a shipped profile's name (kConfig error naming the known ones otherwise).
ProfileSelection select_profile(const std::string& value, const hw::HardwareInfo& hw);

// The resolver for config::Config::load/parse. With `forced` (the command line's hardware_profile=NAME), every
// `hardware_profile:` of the files yields to it.
config::ProfileResolver profile_resolver(const hw::HardwareInfo& hw, std::optional<std::string> forced = std::nullopt);

// Takes `hardware_profile=VALUE`, `--hardware-profile VALUE` and `--hardware-profile=VALUE` out of `args`;
// returns the value (the last one given).
std::optional<std::string> take_profile_argument(std::vector<std::string>& args);

// Composes the profile into a loaded config that names none (`auto`, or `forced`), below all of its keys.
void compose_default_profile(config::Config& config, const hw::HardwareInfo& hw, const std::optional<std::string>& forced);

// The plan row: "profile", the profile's name, and why (chosen by auto from what, or named where).
plan::PlanEntry profile_plan_entry(const config::Config& config, const hw::HardwareInfo& hw);

}  // namespace bellows::app
