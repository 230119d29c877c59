// PNG and JPEG in memory to uint8 [H, W, C] tensors (libpng, libjpeg-turbo), and back: decoding feeds the
// image-folder dataset; encoding makes test fixtures and benchmark data. Every decode failure is a kData
// error naming the file and quoting the library ("cats/0003.png: libpng error: IDAT: CRC error").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bellows::data {

// Images larger than this on a side, or in pixels, are rejected before anything is allocated: a corrupt or
// hostile header must not ask for gigabytes.
inline constexpr std::int64_t kMaxImageSide = 1 << 15;
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

// Decoded image: uint8 [H, W, channels], contiguous. channels is 1 or 3; sources with alpha have it dropped,
// palette and low bit depths are expanded, 16-bit samples scaled to 8 bits, colour and gray converted.
// `name` names the image in errors.
at::Tensor decode_png(std::span<const std::uint8_t> bytes, const std::string& name, int channels = 3);

// JPEG via libjpeg(-turbo). min_height/min_width > 0: decode at the smallest DCT scale n/8 (n = 1..8) whose
// output is still at least that large, which is several times cheaper when the target is small; 0: no
// constraint on that side. A truncated file (libjpeg's "Premature end of JPEG file" warning, after which it
// would pad with gray) is an error. CMYK/YCCK JPEGs are converted to RGB (Adobe's inverted convention).
at::Tensor decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, int channels = 3,
                       int min_height = 0, int min_width = 0);

// By the magic bytes, not the file name; anything but PNG or JPEG is a kData error.
at::Tensor decode_image(std::span<const std::uint8_t> bytes, const std::string& name, int channels = 3, int min_h = 0,
                        int min_w = 0);

// uint8 [H, W, C] with C = 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA); any strides.
std::vector<std::uint8_t> encode_png(const at::Tensor& hwc_uint8);
// uint8 [H, W, C] with C = 1 or 3; quality 1..100. 4:2:0 chroma subsampling (libjpeg's default).
std::vector<std::uint8_t> encode_jpeg(const at::Tensor& hwc_uint8, int quality = 90);

}  // namespace bellows::data
