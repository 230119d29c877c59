// Whole files as byte strings and back, for the binary-format tests (NPY/NPZ, safetensors).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace bellows::test_support {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace bellows::test_support
