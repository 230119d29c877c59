// SHA-256 of files and byte strings (OpenSSL's libcrypto), as lowercase hex: the checksums a checkpoint's
// manifest records for each of its files.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace bellows::ckpt {

std::string sha256_hex(std::string_view bytes);
// Streams the file; kData error naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace bellows::ckpt
