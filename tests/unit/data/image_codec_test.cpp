// PNG/JPEG decoding: round trips, conversions, DCT scaling, corrupt files, decompression bombs.
#include "image_fixtures.h"
#include "test_paths.h"

namespace bellows::data {
namespace image_codec_test {

using namespace image_test;  // image_fixtures.h

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

}  // namespace image_codec_test
}  // namespace bellows::data
