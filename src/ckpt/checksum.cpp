// SHA-256 through OpenSSL's EVP interface; see checksum.h.
#include "bellows/ckpt/checksum.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "bellows/util/check.h"

namespace bellows::ckpt {

namespace {

struct Digest {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  Digest() {
    BELLOWS_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "OpenSSL could not start a SHA-256 digest",
                  "check the libcrypto installation");
  }
  void update(const void* data, std::size_t n) {
    BELLOWS_CHECK(EVP_DigestUpdate(ctx.get(), data, n) == 1, "OpenSSL SHA-256 update failed", "check the libcrypto installation");
  }
  std::string hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    BELLOWS_CHECK(EVP_DigestFinal_ex(ctx.get(), out, &n) == 1, "OpenSSL SHA-256 final failed", "check the libcrypto installation");
    std::string s;
    s.reserve(2 * n);
    for (unsigned int i = 0; i < n; ++i) s += fmt::format("{:02x}", out[i]);
    return s;
  }
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Digest d;
  d.update(bytes.data(), bytes.size());
  return d.hex();
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  BELLOWS_CHECK_DATA(in.good(), fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)),
                     "check that the file exists and is readable");
  Digest d;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) d.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  BELLOWS_CHECK_DATA(in.eof(), fmt::format("reading {} failed", path.string()), "check the disk");
  return d.hex();
}

}  // namespace bellows::ckpt
