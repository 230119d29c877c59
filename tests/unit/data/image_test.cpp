// PNG/JPEG decoding (round trips, conversions, DCT scaling, corrupt files) and the image-folder dataset
// (listing, CSV index, transforms, determinism of augmentation, normalisation on the device). Fixtures are
// encoded here into a temporary folder, so the tests need no files of their own.
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

namespace bellows::data {
namespace {

using test_support::error_from;
using test_support::TempDir;

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// --- helpers ---

void write_file(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_text(const fs::path& path, const std::string& text) {
  write_file(path, Bytes(text.begin(), text.end()));
}

// Deterministic, asymmetric in x and y (so flips and crops show), different per channel.
at::Tensor pattern(std::int64_t h, std::int64_t w, std::int64_t c, int offset = 0) {
  at::Tensor img = at::empty({h, w, c}, at::kByte);
  auto a = img.accessor<std::uint8_t, 3>();
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      for (std::int64_t k = 0; k < c; ++k)
        a[y][x][k] = static_cast<std::uint8_t>((y * 31 + x * 7 + k * 85 + offset) % 256);
  return img;
}

// Smooth content, on which JPEG is close to lossless at high quality.
at::Tensor smooth(std::int64_t h, std::int64_t w, std::int64_t c) {
  const at::Tensor y = at::arange(h, at::kFloat).view({h, 1, 1});
  const at::Tensor x = at::arange(w, at::kFloat).view({1, w, 1});
  const at::Tensor k = at::arange(c, at::kFloat).view({1, 1, c});
  return (128 + 60 * at::sin(x / 9 + k) * at::cos(y / 11 - k)).round().to(at::kByte).contiguous();
}

at::Tensor constant(std::int64_t h, std::int64_t w, std::int64_t c, int value) {
  return at::full({h, w, c}, value, at::kByte);
}

double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().mean().item<double>();
}

// A PNG written by hand (zlib + CRC), for the formats encode_png does not produce: 16-bit, palette.
void append_be32(Bytes& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

void append_chunk(Bytes& out, const char* type, const Bytes& data) {
  append_be32(out, static_cast<std::uint32_t>(data.size()));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  append_be32(out, static_cast<std::uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
}

Bytes handmade_png(std::uint32_t w, std::uint32_t h, int depth, int color_type, const Bytes& pixels,
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

std::size_t find(const Bytes& bytes, const Bytes& what) {
  const auto it = std::search(bytes.begin(), bytes.end(), what.begin(), what.end());
  EXPECT_NE(it, bytes.end());
  return static_cast<std::size_t>(it - bytes.begin());
}

// A class-per-subfolder tree: cat/ (2 PNG), dog/ (1 JPEG, 1 PNG); 3-channel 8x10 pattern images.
void make_pets(const fs::path& root) {
  write_file(root / "cat" / "b.png", encode_png(pattern(8, 10, 3, 1)));
  write_file(root / "cat" / "a.PNG", encode_png(pattern(8, 10, 3, 2)));
  write_file(root / "dog" / "x.jpg", encode_jpeg(smooth(8, 10, 3), 95));
  write_file(root / "dog" / "sub" / "y.png", encode_png(pattern(8, 10, 3, 3)));
  write_text(root / "dog" / "notes.txt", "not an image");
}

// One image in root/only/img.png, with the given options.
std::shared_ptr<ImageFolderDataset> single(const TempDir& dir, const at::Tensor& image, ImageFolderOptions o = {}) {
  write_file(dir.path() / "only" / "img.png", encode_png(image));
  o.root = dir.path();
  if (image.size(2) == 1 && o.mean.size() == 3) {
    o.mean = {0.5};
    o.std = {0.25};
  }
  if (image.size(2) == 1) o.channels = 1;
  return make_image_folder_dataset(o);
}

at::Tensor get_x(const Dataset& ds, std::int64_t index, std::uint64_t seed, bool train) {
  FetchContext ctx;
  ctx.seed = seed;
  ctx.train = train;
  return ds.get(index, ctx).at("x");
}

at::Tensor chw(const at::Tensor& hwc) {
  return hwc.permute({2, 0, 1});
}

// --- PNG ---

// Found by fuzzing (tests/data/fuzz/README.md): a 133-byte progressive JPEG declaring more than 2^27 pixels made
// libjpeg allocate 7 GB and work for 24 s before failing. A file too small for its declared image is rejected at
// its header.
TEST(JpegCodec, ADecompressionBombIsRejectedAtItsHeader) {
  const std::string bytes = test_support::slurp(std::filesystem::path(BELLOWS_TEST_DATA_DIR) / "fuzz" / "jpeg_bomb.jpg");
  ASSERT_EQ(bytes.size(), 133u);
  const auto start = std::chrono::steady_clock::now();
  try {
    decode_image({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, "bomb.jpg");
    ADD_FAILURE() << "the bomb decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("bomb.jpg: truncated JPEG: its 133 bytes cannot hold the "), std::string::npos) << e.message();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(PngCodec, RgbRoundTripIsExact) {
  const at::Tensor img = pattern(13, 17, 3);
  const at::Tensor back = decode_png(encode_png(img), "rgb.png");
  EXPECT_EQ(back.sizes(), img.sizes());
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(at::equal(back, img));
}

TEST(PngCodec, GrayRoundTripIsExactAndExpandsToRgb) {
  const at::Tensor img = pattern(9, 5, 1);
  const Bytes png = encode_png(img);
  EXPECT_TRUE(at::equal(decode_png(png, "gray.png", 1), img));
  const at::Tensor rgb = decode_png(png, "gray.png", 3);
  EXPECT_EQ(rgb.sizes(), (std::vector<std::int64_t>{9, 5, 3}));
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(at::equal(rgb.select(2, k), img.select(2, 0)));
}

TEST(PngCodec, AlphaIsDropped) {
  const at::Tensor rgba = pattern(6, 7, 4);
  EXPECT_TRUE(at::equal(decode_png(encode_png(rgba), "rgba.png"), rgba.narrow(2, 0, 3)));
  const at::Tensor gray_alpha = pattern(6, 7, 2);
  EXPECT_TRUE(at::equal(decode_png(encode_png(gray_alpha), "ga.png", 1), gray_alpha.narrow(2, 0, 1)));
}

TEST(PngCodec, SixteenBitScalesToEightBits) {
  const at::Tensor img = pattern(4, 5, 3);
  Bytes pixels;  // big-endian 16-bit samples v * 257, which scale back to v exactly
  for (const std::uint8_t v :
       std::vector<std::uint8_t>(img.data_ptr<std::uint8_t>(), img.data_ptr<std::uint8_t>() + img.numel())) {
    pixels.push_back(v);
    pixels.push_back(v);
  }
  EXPECT_TRUE(at::equal(decode_png(handmade_png(5, 4, 16, 2, pixels), "deep.png"), img));
}

TEST(PngCodec, PaletteExpandsToRgb) {
  const Bytes palette = {10, 20, 30, 200, 100, 0, 7, 8, 9};
  const Bytes trns = {255, 0};  // transparency is dropped with the alpha it expands to
  const Bytes indices = {0, 1, 2, 1, 2, 0};
  const at::Tensor out = decode_png(handmade_png(3, 2, 8, 3, indices, palette, trns), "palette.png");
  ASSERT_EQ(out.sizes(), (std::vector<std::int64_t>{2, 3, 3}));
  auto a = out.accessor<std::uint8_t, 3>();
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(a[i / 3][i % 3][k], palette[indices[i] * 3 + k]) << i << " " << k;
}

TEST(PngCodec, GrayLookingRgbBecomesThatGray) {
  const at::Tensor gray = pattern(5, 6, 1);
  const at::Tensor out = decode_png(encode_png(gray.expand({5, 6, 3})), "rgb.png", 1);
  EXPECT_TRUE(at::equal(out, gray));
}

TEST(PngCodec, CorruptFilesAreDataErrorsQuotingLibpng) {
  const Bytes png = encode_png(pattern(32, 32, 3));
  const Error cut = error_from([&] { decode_png(Bytes(png.begin(), png.begin() + png.size() / 2), "a/cut.png"); });
  EXPECT_EQ(cut.kind(), ErrorKind::kData);
  EXPECT_EQ(cut.message(),
            "a/cut.png: truncated PNG: the data ends after " + std::to_string(png.size() / 2) + " bytes");

  Bytes flipped = png;
  const std::size_t idat = find(png, {'I', 'D', 'A', 'T'});
  flipped[idat + 4 + 20] ^= 0x10;
  const Error crc = error_from([&] { decode_png(flipped, "a/crc.png"); });
  EXPECT_EQ(crc.kind(), ErrorKind::kData);
  EXPECT_NE(crc.message().find("a/crc.png: libpng error: IDAT"), std::string::npos) << crc.message();

  // Corrupt data usually fails in zlib first (above); a bad checksum alone is libpng's CRC error.
  Bytes bad_crc = png;
  const std::size_t length = (png[idat - 4] << 24) | (png[idat - 3] << 16) | (png[idat - 2] << 8) | png[idat - 1];
  bad_crc[idat + 4 + length] ^= 0x01;
  const Error crc_only = error_from([&] { decode_png(bad_crc, "cats/0003.png"); });
  EXPECT_EQ(crc_only.kind(), ErrorKind::kData);
  EXPECT_EQ(crc_only.message(), "cats/0003.png: libpng error: IDAT: CRC error");

  const Error not_png = error_from([&] { decode_png(Bytes{'n', 'o', 'p', 'e', 0, 0, 0, 0, 0}, "a/nope.png"); });
  EXPECT_EQ(not_png.kind(), ErrorKind::kData);
  EXPECT_NE(not_png.message().find("a/nope.png: libpng error: "), std::string::npos) << not_png.message();
}

TEST(PngCodec, HugeDimensionsAreRejectedBeforeAllocating) {
  Bytes png = encode_png(pattern(4, 4, 3));
  // IHDR at byte 8: length, type, width, height, ..., CRC (recomputed so only the size is wrong).
  const auto with_side = [&](std::uint32_t side) {
    Bytes big = png;
    for (int at_byte : {16, 20})
      for (int s = 0; s < 4; ++s) big[at_byte + s] = static_cast<std::uint8_t>(side >> (24 - 8 * s));
    const std::uint32_t crc = crc32(0, big.data() + 12, 17);
    for (int s = 0; s < 4; ++s) big[29 + s] = static_cast<std::uint8_t>(crc >> (24 - 8 * s));
    return big;
  };
  const Error many = error_from([&] { decode_png(with_side(30000), "huge.png"); });  // each side fine, not the product
  EXPECT_EQ(many.kind(), ErrorKind::kData);
  EXPECT_EQ(many.message(),
            "huge.png: image of 30000x30000 pixels is empty or larger than the limit (32768 per side, "
            "268435456 in all)");
  const Error wide = error_from([&] { decode_png(with_side(100000), "huge.png"); });  // libpng's own limit, set by us
  EXPECT_EQ(wide.kind(), ErrorKind::kData);
  EXPECT_NE(wide.message().find("huge.png: libpng error: "), std::string::npos) << wide.message();
  EXPECT_NE(wide.message().find("exceeds user limit"), std::string::npos) << wide.message();
}

TEST(JpegCodec, DecodeIsCloseToTheSource) {
  const at::Tensor img = smooth(48, 64, 3);
  const at::Tensor out = decode_jpeg(encode_jpeg(img, 95), "s.jpg");
  ASSERT_EQ(out.sizes(), img.sizes());
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_LT(mean_abs_diff(out, img), 2.0);
}

TEST(JpegCodec, GrayJpegDecodesToOneOrThreeChannels) {
  const at::Tensor gray = smooth(24, 40, 1);
  const Bytes jpg = encode_jpeg(gray, 95);
  const at::Tensor one = decode_jpeg(jpg, "g.jpg", 1);
  ASSERT_EQ(one.sizes(), gray.sizes());
  EXPECT_LT(mean_abs_diff(one, gray), 2.0);
  const at::Tensor three = decode_jpeg(jpg, "g.jpg", 3);
  ASSERT_EQ(three.sizes(), (std::vector<std::int64_t>{24, 40, 3}));
  EXPECT_TRUE(at::equal(three.select(2, 1), one.select(2, 0)));
  // And colour to gray: close to the luminance of the source.
  const at::Tensor rgb = smooth(24, 40, 3);
  const at::Tensor luma = (rgb.to(at::kFloat) * at::tensor({0.299f, 0.587f, 0.114f})).sum(2, true);
  EXPECT_LT(mean_abs_diff(decode_jpeg(encode_jpeg(rgb, 95), "c.jpg", 1), luma), 2.0);
}

TEST(JpegCodec, DctScalingPicksTheSmallestSufficientScale) {
  const at::Tensor img = smooth(48, 64, 3);
  const Bytes jpg = encode_jpeg(img, 95);
  const auto size_for = [&](int min_h, int min_w) { return decode_jpeg(jpg, "s.jpg", 3, min_h, min_w).sizes().vec(); };
  EXPECT_EQ(size_for(0, 0), (std::vector<std::int64_t>{48, 64, 3}));
  EXPECT_EQ(size_for(20, 20), (std::vector<std::int64_t>{24, 32, 3}));    // 4/8: 24 >= 20; 3/8 would give 18
  EXPECT_EQ(size_for(10, 10), (std::vector<std::int64_t>{12, 16, 3}));    // 2/8
  EXPECT_EQ(size_for(1, 1), (std::vector<std::int64_t>{6, 8, 3}));        // 1/8
  EXPECT_EQ(size_for(10, 40), (std::vector<std::int64_t>{30, 40, 3}));    // the width decides: 5/8
  EXPECT_EQ(size_for(0, 17), (std::vector<std::int64_t>{18, 24, 3}));     // 3/8; no constraint on the height
  EXPECT_EQ(size_for(100, 100), (std::vector<std::int64_t>{48, 64, 3}));  // never upscaled
  // At 1/2 the DCT decode is close to a 2x2 box average of the source.
  const at::Tensor half = decode_jpeg(jpg, "s.jpg", 3, 24, 32);
  const at::Tensor box = at::avg_pool2d(chw(img).to(at::kFloat).unsqueeze(0), 2).squeeze(0).permute({1, 2, 0});
  EXPECT_LT(mean_abs_diff(half, box), 3.0);
}

TEST(JpegCodec, TruncatedFileIsAnErrorNotGrayPadding) {
  const Bytes jpg = encode_jpeg(smooth(64, 64, 3), 90);
  const Error e = error_from([&] { decode_jpeg(Bytes(jpg.begin(), jpg.begin() + jpg.size() / 2), "dogs/1.jpg"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "dogs/1.jpg: truncated JPEG: Premature end of JPEG file");
  const Error header = error_from([&] { decode_jpeg(Bytes(jpg.begin(), jpg.begin() + 40), "dogs/2.jpg"); });
  EXPECT_EQ(header.kind(), ErrorKind::kData);
  EXPECT_NE(header.message().find("dogs/2.jpg: truncated JPEG"), std::string::npos) << header.message();
  const Error not_jpeg = error_from([&] { decode_jpeg(Bytes{1, 2, 3, 4, 5}, "dogs/3.jpg"); });
  EXPECT_EQ(not_jpeg.kind(), ErrorKind::kData);
  EXPECT_NE(not_jpeg.message().find("dogs/3.jpg: libjpeg error: Not a JPEG file"), std::string::npos)
      << not_jpeg.message();
}

TEST(JpegCodec, HugeDimensionsAreRejectedBeforeAllocating) {
  Bytes jpg = encode_jpeg(smooth(16, 16, 3), 90);
  const std::size_t sof = find(jpg, {0xFF, 0xC0});  // baseline frame header: length(2) precision(1) height(2) width(2)
  for (int i = 0; i < 4; ++i) jpg[sof + 5 + i] = i % 2 == 0 ? 0xEA : 0x60;  // 60000 x 60000
  const Error e = error_from([&] { decode_jpeg(jpg, "huge.jpg"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("huge.jpg: image of 60000x60000 pixels is empty or larger than the limit"),
            std::string::npos)
      << e.message();
}

TEST(ImageCodec, DecodeImageGoesByMagicBytesNotNames) {
  const at::Tensor img = pattern(5, 4, 3);
  EXPECT_TRUE(at::equal(decode_image(encode_png(img), "looks.jpg"), img));
  EXPECT_EQ(decode_image(encode_jpeg(img), "looks.png").sizes(), img.sizes());
  const Error e = error_from([] { decode_image(Bytes{'G', 'I', 'F', '8', '9', 'a'}, "x.png"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "x.png: not a PNG or JPEG file (starts with 47 49 46 38)");
  EXPECT_EQ(error_from([] { decode_image(Bytes{}, "e.png"); }).message(), "e.png: empty file");
  EXPECT_EQ(error_from([] { decode_image(Bytes{1}, "e.png", 2); }).kind(), ErrorKind::kConfig);
}

// --- the dataset: listing ---

TEST(ImageFolder, SubfolderLayoutNumbersSortedClassesAndSortsFiles) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ds->files(), (std::vector<std::string>{"cat/a.PNG", "cat/b.png", "dog/sub/y.png", "dog/x.jpg"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->describe(1), (dir.path() / "cat/b.png").string());
  EXPECT_EQ(ds->name(), "image folder " + dir.path().string() + " (4 images, 2 classes)");

  FetchContext ctx;
  const Example e = ds->get(3, ctx);
  EXPECT_EQ(e.at("x").sizes(), (std::vector<std::int64_t>{3, 8, 10}));
  EXPECT_EQ(e.at("x").scalar_type(), at::kByte);
  EXPECT_EQ(e.at("y").dim(), 0);
  EXPECT_EQ(e.at("y").scalar_type(), at::kLong);
  EXPECT_EQ(e.at("y").item<std::int64_t>(), 1);
  EXPECT_TRUE(at::equal(ds->get(1, ctx).at("x"), chw(pattern(8, 10, 3, 1))));
}

TEST(ImageFolder, CsvIndexGivesTheSameLabelsAsSubfolders) {
  TempDir dir("image_test");
  make_pets(dir.path());
  write_text(dir.path() / "index.csv",
             "path,label\r\ndog/x.jpg,dog\r\n\"cat/b.png\",cat\r\n\r\ncat/a.PNG , cat\r\ndog/sub/y.png,dog\r\n");
  ImageFolderOptions o;
  o.root = dir.path();
  const auto folders = make_image_folder_dataset(o);
  o.index = dir.path() / "index.csv";
  const auto indexed = make_image_folder_dataset(o);
  ASSERT_EQ(indexed->size(), 4);
  EXPECT_EQ(indexed->classes(), folders->classes());
  EXPECT_EQ(indexed->files(), (std::vector<std::string>{"dog/x.jpg", "cat/b.png", "cat/a.PNG", "dog/sub/y.png"}));
  for (std::int64_t i = 0; i < indexed->size(); ++i) {
    const auto& file = indexed->files()[i];
    const auto pos = std::find(folders->files().begin(), folders->files().end(), file) - folders->files().begin();
    EXPECT_EQ(indexed->labels()[i], folders->labels()[pos]) << file;
    FetchContext ctx;
    EXPECT_TRUE(at::equal(indexed->get(i, ctx).at("x"), folders->get(pos, ctx).at("x"))) << file;
  }

  // Integer labels are class numbers; columns may come in either order.
  write_text(dir.path() / "numbers.csv", "label,path\n2,cat/b.png\n0,dog/x.jpg\n");
  o.index = dir.path() / "numbers.csv";
  const auto numbered = make_image_folder_dataset(o);
  EXPECT_EQ(numbered->labels(), (std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(numbered->classes(), (std::vector<std::string>{"0", "1", "2"}));
}

TEST(ImageFolder, ExplicitClassesFixTheNumberingAndRejectUnknownLabels) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.classes = {"bird", "dog", "cat"};
  EXPECT_EQ(make_image_folder_dataset(o)->labels(), (std::vector<std::int64_t>{2, 2, 1, 1}));

  write_text(dir.path() / "index.csv", "path,label\ncat/b.png,cat\ndog/x.jpg,1\ncat/a.PNG,cow\n");
  o.index = dir.path() / "index.csv";
  const Error e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), (dir.path() / "index.csv").string() + " line 4: unknown label 'cow'");
  EXPECT_NE(e.hint().find("bird, dog, cat"), std::string::npos) << e.hint();

  o.index.clear();
  o.classes = {"cat"};
  const Error folder = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(folder.kind(), ErrorKind::kData);
  EXPECT_NE(folder.message().find("class folder 'dog' is not one of the configured classes"), std::string::npos);
}

TEST(ImageFolder, IndexErrorsNameTheIndexAndLine) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.index = dir.path() / "index.csv";
  const std::string index = o.index.string();
  const auto message = [&](const std::string& csv) {
    write_text(o.index, csv);
    const Error e = error_from([&] { make_image_folder_dataset(o); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    return e.message();
  };
  EXPECT_EQ(message("path,label,weight\ncat/b.png,cat,1\n"), index + " line 1: unknown column 'weight'");
  EXPECT_EQ(message("path\ncat/b.png\n"), index + " line 1: header 'path' lacks the label column");
  EXPECT_EQ(message("path,label\ncat/b.png,cat\ncat/zz.png,cat\n"),
            index + " line 3: image 'cat/zz.png' does not exist under " + dir.path().string());
  EXPECT_EQ(message("path,label\ncat/b.png,cat,extra\n"), index + " line 2: 3 fields, the header has 2");
  EXPECT_EQ(message("path,label\n"), "image index " + index + " lists no images");
  o.index = dir.path() / "absent.csv";
  const Error absent = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(absent.kind(), ErrorKind::kData);
  EXPECT_NE(absent.message().find("absent.csv"), std::string::npos);
}

TEST(ImageFolder, MissingOrEmptyFoldersAreDataErrors) {
  TempDir dir("image_test");
  ImageFolderOptions o;
  o.root = dir.path() / "nowhere";
  Error e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "image folder " + o.root.string() + " does not exist");

  o.root = dir.path();
  e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "image folder " + dir.path().string() + " has no class subfolders");

  make_pets(dir.path());
  fs::create_directories(dir.path() / "emu");
  write_text(dir.path() / "emu" / "readme.md", "soon");
  e = error_from([&] { make_image_folder_dataset(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_EQ(e.message(), "class folder " + (dir.path() / "emu").string() + " has no images (.png, .jpg, .jpeg)");
}

TEST(ImageFolder, BadOptionsAreConfigErrors) {
  TempDir dir("image_test");
  make_pets(dir.path());
  const auto kind_of = [&](const std::function<void(ImageFolderOptions&)>& edit) {
    ImageFolderOptions o;
    o.root = dir.path();
    edit(o);
    return error_from([&] { make_image_folder_dataset(o); }).kind();
  };
  EXPECT_EQ(kind_of([](auto& o) { o.channels = 2; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.channels = 1; }), ErrorKind::kConfig);  // three means for one channel
  EXPECT_EQ(kind_of([](auto& o) { o.mean = {0.5, 0.5}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.std = {0.2, 0.0, 0.2}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32, 32, 3}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {0}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.crop = {8}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32, 40}, o.crop = {33, 16}; }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([](auto& o) { o.resize = {32}, o.crop = {16, 40}; }), ErrorKind::kConfig);
}

TEST(ImageFolder, CorruptImagesAreDataErrorsNamingTheRelativePath) {
  TempDir dir("image_test");
  const Bytes png = encode_png(pattern(32, 32, 3));
  const Bytes jpg = encode_jpeg(smooth(32, 32, 3), 90);
  Bytes flipped = png;
  flipped[find(png, {'I', 'D', 'A', 'T'}) + 4 + 20] ^= 0x10;
  write_file(dir.path() / "cats" / "0001.png", Bytes(png.begin(), png.begin() + png.size() / 2));
  write_file(dir.path() / "cats" / "0002.png", flipped);
  write_file(dir.path() / "cats" / "0003.png", Bytes{'j', 'u', 'n', 'k', '!', '!', '!', '!', '!'});
  write_file(dir.path() / "dogs" / "1.jpg", Bytes(jpg.begin(), jpg.begin() + jpg.size() / 2));
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  const std::vector<std::string> expected = {"cats/0001.png: truncated PNG", "cats/0002.png: libpng error: IDAT",
                                             "cats/0003.png: not a PNG or JPEG file",
                                             "dogs/1.jpg: truncated JPEG: Premature end of JPEG file"};
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    FetchContext ctx;
    const Error e = error_from([&] { ds->get(i, ctx); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_EQ(e.message().rfind(expected[i], 0), 0u) << e.message();
  }
}

TEST(ImageFolder, StageTimesArePositiveAfterAGet) {
  TempDir dir("image_test");
  make_pets(dir.path());
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {6, 6};
  const auto ds = make_image_folder_dataset(o);
  FetchContext ctx;
  ds->get(0, ctx);
  EXPECT_GT(ctx.times.read, 0);
  EXPECT_GT(ctx.times.decode, 0);
  EXPECT_GT(ctx.times.transform, 0);
  const std::int64_t batch[] = {0, 3};
  ds->get_batch(batch, ctx);
  EXPECT_GT(ctx.times.collate, 0);
}

TEST(ImageFolder, DifferentSizesInABatchAskForResizeOrCrop) {
  TempDir dir("image_test");
  write_file(dir.path() / "a" / "small.png", encode_png(pattern(8, 8, 3)));
  write_file(dir.path() / "a" / "tall.png", encode_png(pattern(12, 8, 3)));
  ImageFolderOptions o;
  o.root = dir.path();
  const auto ds = make_image_folder_dataset(o);
  const std::int64_t batch[] = {0, 1};
  FetchContext ctx;
  const Error e = error_from([&] { ds->get_batch(batch, ctx); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("is 8x8"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("tall.png is 12x8"), std::string::npos) << e.message();
  EXPECT_NE(e.hint().find("set data.images.resize or data.images.crop"), std::string::npos) << e.hint();

  o.crop = {8, 8};
  const Batch b = make_image_folder_dataset(o)->get_batch(batch, ctx);
  EXPECT_EQ(b.at("x").sizes(), (std::vector<std::int64_t>{2, 3, 8, 8}));
  EXPECT_EQ(b.at("y").sizes(), (std::vector<std::int64_t>{2}));

  o.crop = {10, 10};  // larger than the images, and no resize
  const Error small = error_from([&] { make_image_folder_dataset(o)->get(0, ctx); });
  EXPECT_EQ(small.kind(), ErrorKind::kData);
  EXPECT_EQ(small.message(), "a/small.png: image is 8x8, smaller than the crop 10x10");
}

// --- the dataset: transforms ---

TEST(ImageTransforms, CenterCropIsExact) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(9, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 6};
  o.random_crop = false;
  const auto ds = single(dir, img, o);
  const at::Tensor center = chw(img.narrow(0, 2, 4).narrow(1, 3, 6));  // (9 - 4) / 2, (12 - 6) / 2
  for (const bool train : {true, false}) EXPECT_TRUE(at::equal(get_x(*ds, 0, 5, train), center)) << train;
}

TEST(ImageTransforms, FlipIsDeterministicPerSeedAndMatchesAManualFlip) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(5, 7, 3);
  ImageFolderOptions o;
  o.hflip = true;
  const auto ds = single(dir, img, o);
  const at::Tensor plain = chw(img), flipped = chw(img).flip({2});
  int flips = 0;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    const at::Tensor x = get_x(*ds, 0, seed, true);
    EXPECT_TRUE(at::equal(x, get_x(*ds, 0, seed, true))) << seed;  // same (seed, index): same draws
    const bool is_flipped = at::equal(x, flipped);
    EXPECT_TRUE(is_flipped || at::equal(x, plain)) << seed;
    flips += is_flipped;
  }
  EXPECT_GT(flips, 4);
  EXPECT_LT(flips, 28);
  // Another instance of the dataset (as another worker would use) draws the same.
  o.root = dir.path();
  const auto twin = make_image_folder_dataset(o);
  for (std::uint64_t seed = 0; seed < 32; ++seed)
    EXPECT_TRUE(at::equal(get_x(*twin, 0, seed, true), get_x(*ds, 0, seed, true)));
}

TEST(ImageTransforms, RandomCropIsDeterministicAndVaries) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(10, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 5};
  const auto ds = single(dir, img, o);
  std::set<std::pair<std::int64_t, std::int64_t>> offsets;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const at::Tensor x = get_x(*ds, 0, seed, true);
    ASSERT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 4, 5}));
    EXPECT_TRUE(at::equal(x, get_x(*ds, 0, seed, true)));
    bool found = false;
    for (std::int64_t top = 0; top <= 6 && !found; ++top)
      for (std::int64_t left = 0; left <= 7 && !found; ++left)
        if (at::equal(x, chw(img.narrow(0, top, 4).narrow(1, left, 5)))) {
          offsets.emplace(top, left);
          found = true;
        }
    EXPECT_TRUE(found) << seed;
  }
  EXPECT_GT(offsets.size(), 8u);
}

TEST(ImageTransforms, EvalModeNeverFlipsAndCropsTheCenter) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(10, 12, 3);
  ImageFolderOptions o;
  o.crop = {4, 6};
  o.hflip = true;
  const auto ds = single(dir, img, o);
  const at::Tensor center = chw(img.narrow(0, 3, 4).narrow(1, 3, 6));
  for (std::uint64_t seed = 0; seed < 32; ++seed) EXPECT_TRUE(at::equal(get_x(*ds, 0, seed, false), center)) << seed;
}

TEST(ImageTransforms, ResizeGivesTheRequestedSizeAndKeepsAConstantImageConstant) {
  TempDir dir("image_test");
  write_file(dir.path() / "a" / "wide.png", encode_png(constant(40, 60, 3, 77)));
  write_file(dir.path() / "a" / "tall.png", encode_png(constant(60, 40, 3, 200)));
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {24, 24};
  auto ds = make_image_folder_dataset(o);  // files: tall, wide
  at::Tensor x = get_x(*ds, 1, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 24, 24}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 77)));
  o.resize = {20};  // shorter side to 20
  ds = make_image_folder_dataset(o);
  EXPECT_EQ(get_x(*ds, 1, 0, true).sizes(), (std::vector<std::int64_t>{3, 20, 30}));
  x = get_x(*ds, 0, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 30, 20}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 200)));
  o.resize = {80, 90};  // upscaling too
  x = get_x(*make_image_folder_dataset(o), 1, 0, true);
  EXPECT_EQ(x.sizes(), (std::vector<std::int64_t>{3, 80, 90}));
  EXPECT_TRUE(at::equal(x, at::full_like(x, 77)));
}

TEST(ImageTransforms, ResizeOfAJpegUsesDctScalingAndGivesTheResizedSize) {
  TempDir dir("image_test");
  const at::Tensor img = smooth(96, 128, 3);
  write_file(dir.path() / "a" / "p.jpg", encode_jpeg(img, 95));
  ImageFolderOptions o;
  o.root = dir.path();
  o.resize = {24, 32};  // decoded at 2/8 (24x32), then nothing left to resize
  const at::Tensor scaled = get_x(*make_image_folder_dataset(o), 0, 0, true);
  o.jpeg_dct_scaling = false;  // full decode, then antialiased resize
  const at::Tensor full = get_x(*make_image_folder_dataset(o), 0, 0, true);
  EXPECT_EQ(scaled.sizes(), (std::vector<std::int64_t>{3, 24, 32}));
  EXPECT_EQ(full.sizes(), (std::vector<std::int64_t>{3, 24, 32}));
  EXPECT_LT(mean_abs_diff(scaled, full), 6.0);  // DCT scaling filters like a box, the resize like a triangle
}

TEST(ImageTransforms, FinishOnDeviceNormalisesEachChannel) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(3, 4, 3);
  ImageFolderOptions o;
  const auto ds = single(dir, img, o);
  FetchContext ctx;
  const std::int64_t batch_indices[] = {0, 0};
  Batch batch = ds->get_batch(batch_indices, ctx);
  ds->finish_on_device(batch);
  const at::Tensor& x = batch.at("x");
  ASSERT_EQ(x.scalar_type(), at::kFloat);
  ASSERT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 3, 3, 4}));
  const double mean[] = {0.485, 0.456, 0.406}, std[] = {0.229, 0.224, 0.225};
  for (int c = 0; c < 3; ++c) {
    const double v = img[2][1][c].item<std::uint8_t>();
    EXPECT_NEAR(x[1][c][2][1].item<float>(), (v / 255.0 - mean[c]) / std[c], 1e-6) << c;
  }
  // A whole-tensor check against the formula, done the long way in float64.
  const at::Tensor expected = (chw(img).to(at::kDouble) / 255 - at::tensor({0.485, 0.456, 0.406}).view({3, 1, 1})) /
                              at::tensor({0.229, 0.224, 0.225}).view({3, 1, 1});
  EXPECT_LT((x[0].to(at::kDouble) - expected).abs().max().item<double>(), 1e-6);
}

TEST(ImageTransforms, FinishOnDeviceWorksOnTheBatchsDevice) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir("image_test");
  const auto ds = single(dir, pattern(6, 5, 3));
  FetchContext ctx;
  const std::int64_t two[] = {0, 0};
  Batch on_host = ds->get_batch(two, ctx);
  const c10::Device cuda(c10::kCUDA, 0);
  Batch on_device = on_host.to(cuda);
  Batch again = on_host.to(cuda);  // the second batch uses the constants cached on the device
  ds->finish_on_device(on_host);
  ds->finish_on_device(on_device);
  ds->finish_on_device(again);
  EXPECT_TRUE(on_device.at("x").is_cuda());
  EXPECT_LT((on_device.at("x").cpu() - on_host.at("x")).abs().max().item<float>(), 1e-6);
  EXPECT_TRUE(at::equal(again.at("x"), on_device.at("x")));
}

TEST(ImageTransforms, GrayImagesWithOneMeanAndStd) {
  TempDir dir("image_test");
  const at::Tensor img = pattern(4, 4, 1);
  const auto ds = single(dir, img);  // channels 1, mean 0.5, std 0.25
  FetchContext ctx;
  const std::int64_t one[] = {0};
  Batch batch = ds->get_batch(one, ctx);
  EXPECT_TRUE(at::equal(batch.at("x")[0], chw(img)));
  ds->finish_on_device(batch);
  const double v = img[1][2][0].item<std::uint8_t>();
  EXPECT_NEAR(batch.at("x")[0][0][1][2].item<float>(), (v / 255.0 - 0.5) / 0.25, 1e-6);
}

}  // namespace
}  // namespace bellows::data
