// What both checkpoint layouts share when they write (private to src/ckpt/): the manifest's common fields, and a
// finished temporary directory moved into place.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "bellows/ckpt/checkpoint.h"  // defines: Checkpoint

namespace bellows::ckpt {

// format, format_version, versions, created_utc, step, epoch, info and `files`.
nlohmann::json manifest_json(std::int64_t format_version, const Checkpoint& c, const nlohmann::json& files);

// `tmp` (complete, its manifest written, fsynced) renamed to `final_path` durably; an existing checkpoint of the same
// step is moved aside first and removed after, so one of the two is always whole.
void install_checkpoint(const std::filesystem::path& tmp, const std::filesystem::path& final_path);

// ".tmp-step-000000012-<pid>-<n>": a writer's temporary directory beside the checkpoints (prune_checkpoints removes
// those of writers that died).
std::string temporary_name(const std::string& name, long pid, int n);

}  // namespace bellows::ckpt
