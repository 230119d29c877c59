// Fuzzes the in-memory image decoders of include/bellows/data/image_codec.h straight from the input bytes:
// data::decode_image (by magic bytes; RGB, and gray at a reduced JPEG DCT scale), and data::decode_png /
// data::decode_jpeg given bytes of the other format; checks the uint8 [H, W, C] result and the size limits.
//
// Input: the image file's bytes (PNG or JPEG).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "bellows/data/image_codec.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

constexpr std::uint8_t kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::uint8_t kJpegMagic[] = {0xff, 0xd8};

bool starts_with(std::span<const std::uint8_t> bytes, std::span<const std::uint8_t> magic) {
  return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

void check_image(const at::Tensor& t, int channels, const char* what) {
  const bool shape_ok = t.defined() && t.dim() == 3 && t.size(2) == channels && t.size(0) > 0 && t.size(1) > 0;
  fz::expect(shape_ok && t.scalar_type() == at::kByte && t.is_contiguous(),
             std::string(what) + " did not return a contiguous uint8 [H, W, " + std::to_string(channels) + "]");
  if (!shape_ok) return;
  fz::expect(t.size(0) <= data::kMaxImageSide && t.size(1) <= data::kMaxImageSide &&
                 t.size(0) * t.size(1) <= data::kMaxImagePixels,
             std::string(what) + " returned an image beyond kMaxImageSide/kMaxImagePixels");
  fz::touch(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!fz::take(size)) return 0;
  const std::span<const std::uint8_t> bytes(data, size);
  const std::string name = "fuzz-input";

  try {
    check_image(data::decode_image(bytes, name, 3), 3, "decode_image(channels=3)");
  } catch (const Error& e) {
    fz::rejected(e);
  }
  // Gray, and for a JPEG the reduced DCT scale (the smallest n/8 that keeps at least 4x4).
  try {
    check_image(data::decode_image(bytes, name, 1, 4, 4), 1, "decode_image(channels=1, min 4x4)");
  } catch (const Error& e) {
    fz::rejected(e);
  }
  // Each decoder called directly with bytes that decode_image would not have given it.
  if (!starts_with(bytes, kPngMagic)) {
    try {
      check_image(data::decode_png(bytes, name, 3), 3, "decode_png");
    } catch (const Error& e) {
      fz::rejected(e);
    }
  }
  if (!starts_with(bytes, kJpegMagic)) {
    try {
      check_image(data::decode_jpeg(bytes, name, 3), 3, "decode_jpeg");
    } catch (const Error& e) {
      return fz::rejected(e);
    }
  }
  return 0;
}
