// Writing a small text file (a plan, a resolved config, a summary) so that a reader never sees half of it:
// written to <path>.tmp, flushed, then renamed over <path>.
#pragma once

#include <filesystem>
#include <string_view>

namespace bellows {

// kResource error naming the file when it cannot be written (the temporary file is removed then).
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace bellows
