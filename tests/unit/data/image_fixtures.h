// What the image tests share (image_codec_test.cpp, image_folder_test.cpp): images encoded here into a temporary
// folder (hand-made PNGs, patterns, a pets folder), so the tests need no files of their own.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "bellows/data/image_codec.h"
#include "bellows/data/image_folder.h"
#include "bellows/util/error.h"
#include "file_bytes.h"
#include "test_util.h"

namespace bellows::data::image_test {

using test_support::error_from;
using test_support::TempDir;

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// --- helpers ---

inline void write_file(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_text(const fs::path& path, const std::string& text) {
  write_file(path, Bytes(text.begin(), text.end()));
}

// Deterministic, asymmetric in x and y (so flips and crops show), different per channel.
inline at::Tensor pattern(std::int64_t h, std::int64_t w, std::int64_t c, int offset = 0) {
  at::Tensor img = at::empty({h, w, c}, at::kByte);
  auto a = img.accessor<std::uint8_t, 3>();
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      for (std::int64_t k = 0; k < c; ++k)
        a[y][x][k] = static_cast<std::uint8_t>((y * 31 + x * 7 + k * 85 + offset) % 256);
  return img;
}

// Smooth content, on which JPEG is close to lossless at high quality.
inline at::Tensor smooth(std::int64_t h, std::int64_t w, std::int64_t c) {
  const at::Tensor y = at::arange(h, at::kFloat).view({h, 1, 1});
  const at::Tensor x = at::arange(w, at::kFloat).view({1, w, 1});
  const at::Tensor k = at::arange(c, at::kFloat).view({1, 1, c});
  return (128 + 60 * at::sin(x / 9 + k) * at::cos(y / 11 - k)).round().to(at::kByte).contiguous();
}

inline at::Tensor constant(std::int64_t h, std::int64_t w, std::int64_t c, int value) {
  return at::full({h, w, c}, value, at::kByte);
}

inline double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().mean().item<double>();
}

// A PNG written by hand (zlib + CRC), for the formats encode_png does not produce: 16-bit, palette.
inline void append_be32(Bytes& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

inline void append_chunk(Bytes& out, const char* type, const Bytes& data) {
  append_be32(out, static_cast<std::uint32_t>(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  append_be32(out, static_cast<std::uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
}

inline Bytes handmade_png(std::uint32_t w, std::uint32_t h, int depth, int color_type, const Bytes& pixels,
                   const Bytes& palette = {}, const Bytes& trns = {}) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr;
  append_be32(ihdr, w);
  append_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {static_cast<std::uint8_t>(depth), static_cast<std::uint8_t>(color_type), 0, 0, 0});
  append_chunk(out, "IHDR", ihdr);
  if (!palette.empty()) append_chunk(out, "PLTE", palette);
  if (!trns.empty()) append_chunk(out, "tRNS", trns);
  const std::size_t row = pixels.size() / h;
  Bytes raw;  // each row behind filter byte 0 (none)
  for (std::uint32_t y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), pixels.begin() + y * row, pixels.begin() + (y + 1) * row);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  Bytes z(size);
  EXPECT_EQ(compress(z.data(), &size, raw.data(), static_cast<uLong>(raw.size())), Z_OK);
  z.resize(size);
  append_chunk(out, "IDAT", z);
  append_chunk(out, "IEND", {});
  return out;
}

inline std::size_t find(const Bytes& bytes, const Bytes& what) {
  const auto it = std::search(bytes.begin(), bytes.end(), what.begin(), what.end());
  EXPECT_NE(it, bytes.end());
  return static_cast<std::size_t>(it - bytes.begin());
}

// A class-per-subfolder tree: cat/ (2 PNG), dog/ (1 JPEG, 1 PNG); 3-channel 8x10 pattern images.
inline void make_pets(const fs::path& root) {
  write_file(root / "cat" / "b.png", encode_png(pattern(8, 10, 3, 1)));
  write_file(root / "cat" / "a.PNG", encode_png(pattern(8, 10, 3, 2)));
  write_file(root / "dog" / "x.jpg", encode_jpeg(smooth(8, 10, 3), 95));
  write_file(root / "dog" / "sub" / "y.png", encode_png(pattern(8, 10, 3, 3)));
  write_text(root / "dog" / "notes.txt", "not an image");
}

// One image in root/only/img.png, with the given options.
inline std::shared_ptr<ImageFolderDataset> single(const TempDir& dir, const at::Tensor& image, ImageFolderOptions o = {}) {
  write_file(dir.path() / "only" / "img.png", encode_png(image));
  o.root = dir.path();
  if (image.size(2) == 1 && o.mean.size() == 3) {
    o.mean = {0.5};
    o.std = {0.25};
  }
  if (image.size(2) == 1) o.channels = 1;
  return make_image_folder_dataset(o);
}

inline at::Tensor get_x(const Dataset& ds, std::int64_t index, std::uint64_t seed, bool train) {
  FetchContext ctx;
  ctx.seed = seed;
  ctx.train = train;
  return ds.get(index, ctx).at("x");
}

inline at::Tensor chw(const at::Tensor& hwc) {
  return hwc.permute({2, 0, 1});
}

}  // namespace bellows::data::image_test
