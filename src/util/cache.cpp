// The user cache folder and FNV-1a; see cache.h.
#include "bellows/util/cache.h"

#include <cstdlib>

namespace bellows {

std::filesystem::path user_cache_dir() {
  const char* cache = std::getenv("BELLOWS_CACHE");
  if (cache && *cache) return cache;
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "bellows";
  return {};
}

std::uint64_t fnv1a(std::string_view bytes, std::uint64_t hash) {
  for (const unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

}  // namespace bellows
