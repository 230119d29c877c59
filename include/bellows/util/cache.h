// Where bellows keeps what it derives from data outside the data's folder (NetCDF statistics, trained
// vocabularies), and the hash that names those entries after the data's path or content.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace bellows {

// $BELLOWS_CACHE, else $HOME/.cache/bellows; empty when neither is set.
std::filesystem::path user_cache_dir();

// 64-bit FNV-1a of `bytes`, continuing from `hash` (chain calls to hash several pieces).
constexpr std::uint64_t kFnv1aOffset = 0xcbf29ce484222325ULL;
std::uint64_t fnv1a(std::string_view bytes, std::uint64_t hash = kFnv1aOffset);

}  // namespace bellows
