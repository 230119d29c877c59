// See atomic_file.h.
#include "bellows/util/atomic_file.h"

#include <fmt/format.h>

#include <fstream>
#include <system_error>

#include "bellows/util/check.h"

namespace bellows {

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  bool written = false;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    written = out.good();
  }
  std::error_code ec;
  if (!written) std::filesystem::remove(tmp, ec);
  BELLOWS_CHECK_RESOURCE(written, fmt::format("writing {} failed", tmp.string()), "check free disk space and permissions");
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  }
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("renaming {} to {} failed: {}", tmp.string(), path.string(), ec.message()),
                         "check the folder's permissions");
}

}  // namespace bellows
