// The one rule for relative paths in a config, and the message for a path that is not there; see paths.h.
#include "bellows/config/paths.h"

#include <fmt/format.h>

#include "bellows/util/check.h"

namespace bellows::config {
namespace {

namespace fs = std::filesystem;

// A name given to YAML text that has no file ("<embedded demo>", the C API's "<config text>"): no directory of its own.
bool names_no_file(const std::string& name) {
  return name.empty() || (name.front() == '<' && name.back() == '>');
}

}  // namespace

PathBase path_base(const Origin& origin) {
  std::error_code ec;
  if (names_no_file(origin.file)) {
    const fs::path cwd = fs::current_path(ec);
    return {cwd, fmt::format("relative to the working directory, {}", cwd.string())};
  }
  const fs::path dir = fs::absolute(origin.file, ec).parent_path().lexically_normal();
  return {dir, fmt::format("relative to the directory of {}, {}", origin.file, dir.string())};
}

fs::path resolve_path(const std::string& written, const Origin& origin) {
  const fs::path path(written);
  if (path.is_absolute()) return path;
  return (path_base(origin).dir / path).lexically_normal();
}

void check_path_exists(const Config& config, const std::string& key, const fs::path& path, ErrorKind kind,
                       const std::string& hint) {
  std::error_code ec;
  if (fs::exists(path, ec)) return;
  const Origin& origin = config.origin(key);
  const std::string full_hint = fmt::format(
      "{}; a relative path in a config file starts at that file's directory, on the command line at the working "
      "directory",
      hint);
  if (origin.written_path.empty()) {  // written absolute
    BELLOWS_FAIL(kind, fmt::format("{}: {} {} does not exist", origin.str(), key, path.string()), full_hint);
  }
  BELLOWS_FAIL(kind,
               fmt::format("{}: {} '{}' does not exist: looked for {} ({})", origin.str(), key, origin.written_path,
                           path.string(), path_base(origin).rule),
               full_hint);
}

}  // namespace bellows::config
