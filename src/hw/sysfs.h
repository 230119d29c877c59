// Private helpers for reading Linux procfs/sysfs text files: small, total functions that return
// std::nullopt rather than throw, because a missing file only means a fact is unknown on this system.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace bellows::hw::sysfs {

std::optional<std::string> read_file(const std::filesystem::path& path);
std::optional<std::string> read_first_line(const std::filesystem::path& path);
std::optional<std::int64_t> read_int(const std::filesystem::path& path);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt on malformed text.
std::optional<std::set<int>> parse_cpu_list(std::string_view text);

// sysfs cache sizes: "32K", "2048K", "32M" -> bytes; nullopt on malformed text.
std::optional<std::int64_t> parse_size(std::string_view text);

// "key : value" lines (as in /proc/cpuinfo and /proc/meminfo) of the first block; keys and values trimmed.
std::map<std::string, std::string> parse_key_values(std::string_view text, char separator = ':');

std::string trim(std::string_view text);

}  // namespace bellows::hw::sysfs
