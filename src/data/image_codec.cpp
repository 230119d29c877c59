// PNG and JPEG codecs over libpng and libjpeg(-turbo); see image_codec.h.
// Both libraries report errors by longjmp. The rule kept throughout: a function that calls setjmp holds no
// C++ object with a destructor and throws nothing; it only drives the library and returns false after a
// longjmp. Its caller, which never calls setjmp, owns the buffers and turns the recorded message into a
// bellows::Error. So no exception crosses a library frame and no longjmp skips a destructor.
#include "bellows/data/image_codec.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// clang-format off
#include <jpeglib.h>  // needs <cstdio> and <cstddef> first
#include <jerror.h>
// clang-format on

#include "bellows/util/check.h"

namespace bellows::data {

namespace {

constexpr const char* kCorruptHint = "the file is corrupt or not an image; re-encode it or remove it from the data";
constexpr const char* kTruncatedHint =
    "the file is incomplete (an interrupted copy or download?); fetch it again or remove it from the data";

void check_channels(int channels, const std::string& name) {
  BELLOWS_CHECK_CONFIG(channels == 1 || channels == 3, fmt::format("{}: cannot decode to {} channels", name, channels),
                       "set data.images.channels to 1 (gray) or 3 (RGB)");
}

void check_size(std::int64_t height, std::int64_t width, const std::string& name) {
  BELLOWS_CHECK_DATA(
      height > 0 && width > 0 && height <= kMaxImageSide && width <= kMaxImageSide && height * width <= kMaxImagePixels,
      fmt::format("{}: image of {}x{} pixels is empty or larger than the limit ({} per side, {} in all)", name, height,
                  width, kMaxImageSide, kMaxImagePixels),
      "a corrupt header, or a huge image: downscale it before training");
}

// ------------------------------------------------------------------------------------------------ PNG ---

// Plain C state shared with libpng's callbacks.
struct PngIo {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos;
  bool truncated;
  bool out_of_memory;
  std::vector<std::uint8_t>* sink;  // encoding
  char message[256];
  char warning[256];  // the last warning: libpng often warns with the detail, then fails in general terms
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", message);
  png_longjmp(png, 1);
}

// Warnings alone concern ancillary chunks (a bad gamma, an oversized text chunk) and leave the pixels fine;
// kept only to explain a following error.
void png_on_warning(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->warning, sizeof io->warning, "%s", message);
}

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) {
    io->truncated = true;
    png_error(png, "unexpected end of data");
  }
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void png_write_memory(png_structp png, png_bytep data, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  try {
    io->sink->insert(io->sink->end(), data, data + n);
  } catch (...) {
    io->out_of_memory = true;
  }
  if (io->out_of_memory) png_error(png, "out of memory");  // outside the handler: longjmp must not leave one
}

void png_flush_memory(png_structp) {}

struct PngHeader {
  png_uint_32 height, width;
  int channels;
  std::size_t row_bytes;
};

// Reads the header and sets up the conversions to 8-bit gray or RGB without alpha.
bool png_read_header(png_structp png, png_infop info, int channels, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  png_set_strip_alpha(png);  // also the alpha that palette expansion makes from a tRNS chunk
  const bool is_color = (color & PNG_COLOR_MASK_COLOR) != 0;
  if (channels == 3 && !is_color) png_set_gray_to_rgb(png);
  if (channels == 1 && is_color) png_set_rgb_to_gray_fixed(png, /*error_action=*/1, -1, -1);  // default weights
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  header->height = png_get_image_height(png, info);
  header->width = png_get_image_width(png, info);
  header->channels = png_get_channels(png, info);
  header->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool png_read_pixels(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);  // checks the chunks after the pixels too: a file cut before IEND is truncated
  return true;
}

[[noreturn]] void fail_png(const PngIo& io, const std::string& name) {
  if (io.truncated) {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: truncated PNG: the data ends after {} bytes", name, io.size),
                 kTruncatedHint);
  }
  const std::string warned = io.warning[0] ? fmt::format(" (after the warning: {})", io.warning) : "";
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: libpng error: {}{}", name, io.message, warned), kCorruptHint);
}

struct PngReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct PngWriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriteGuard() { png_destroy_write_struct(&png, info ? &info : nullptr); }
};

bool png_write_all(png_structp png, png_infop info, png_uint_32 height, png_uint_32 width, int color_type,
                   png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, width, height, 8, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

// ----------------------------------------------------------------------------------------------- JPEG ---

struct JpegError {
  jpeg_error_mgr pub;  // first: libjpeg hands back cinfo->err, which is this
  std::jmp_buf jump;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg only warns when the data ends early, and then pads the image with gray: that is an error here.
// Other warnings ("N extraneous bytes before marker") leave a usable image, which PIL and torchvision
// accept too, so they are counted and ignored.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* e = reinterpret_cast<JpegError*>(cinfo->err);
    e->truncated = true;
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
  }
  if (level < 0) ++cinfo->err->num_warnings;
}

void jpeg_init_error(JpegError* e) {
  jpeg_std_error(&e->pub);
  e->pub.error_exit = jpeg_on_error;
  e->pub.emit_message = jpeg_on_message;
  e->truncated = false;
  e->message[0] = '\0';
}

bool jpeg_open(jpeg_decompress_struct* cinfo, JpegError* err, const std::uint8_t* data, std::size_t size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool jpeg_start(jpeg_decompress_struct* cinfo, JpegError* err) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);  // progressive files are read whole here
  return true;
}

bool jpeg_read_pixels(jpeg_decompress_struct* cinfo, JpegError* err, std::uint8_t* out, std::size_t row_bytes) {
  if (setjmp(err->jump)) return false;
  JSAMPROW rows[16];
  while (cinfo->output_scanline < cinfo->output_height) {
    const JDIMENSION first = cinfo->output_scanline;
    const JDIMENSION n = std::min<JDIMENSION>(16, cinfo->output_height - first);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = out + (first + i) * row_bytes;
    jpeg_read_scanlines(cinfo, rows, n);
  }
  jpeg_finish_decompress(cinfo);  // reads up to EOI: a file cut after the last scan is truncated too
  return true;
}

[[noreturn]] void fail_jpeg(const JpegError& err, const std::string& name) {
  if (err.truncated) {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: truncated JPEG: {}", name, err.message), kTruncatedHint);
  }
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: libjpeg error: {}", name, err.message), kCorruptHint);
}

// What libjpeg may allocate for one image (a progressive 100-megapixel colour JPEG needs about 600 MB of
// coefficients); beyond it libjpeg-turbo fails (it has no backing store) and the decode is a data error.
constexpr long kJpegMemoryLimit = 1L << 30;

struct JpegDecompressGuard {
  jpeg_decompress_struct* cinfo;
  ~JpegDecompressGuard() { jpeg_destroy_decompress(cinfo); }  // safe on a zeroed struct (mem == NULL)
};

// The smallest n/8 (libjpeg rounds sizes up) that keeps both sides at least the requested ones; 8 when even
// the full size is smaller.
int jpeg_scale_eighths(std::int64_t height, std::int64_t width, int min_height, int min_width) {
  if (min_height <= 0 && min_width <= 0) return 8;
  for (int n = 1; n < 8; ++n) {
    const bool tall = min_height <= 0 || (height * n + 7) / 8 >= min_height;
    const bool wide = min_width <= 0 || (width * n + 7) / 8 >= min_width;
    if (tall && wide) return n;
  }
  return 8;
}

// Adobe writes CMYK inverted (the common case, and what Photoshop produces); plain CMYK otherwise.
at::Tensor cmyk_to_rgb(const at::Tensor& cmyk, bool inverted) {
  at::Tensor v = cmyk.to(at::kInt);
  if (!inverted) v = 255 - v;
  at::Tensor k = v.narrow(2, 3, 1);
  return (v.narrow(2, 0, 3) * k + 127).div(255, "floor").to(at::kByte).contiguous();
}

at::Tensor rgb_to_gray(const at::Tensor& rgb) {
  at::Tensor v = rgb.to(at::kInt);
  at::Tensor y = v.select(2, 0) * 299 + v.select(2, 1) * 587 + v.select(2, 2) * 114 + 500;  // ITU-R 601
  return y.div(1000, "floor").to(at::kByte).unsqueeze(2).contiguous();
}

// A destination that grows a malloc'd buffer: C only, so it can run inside libjpeg and be freed after a
// longjmp by the caller, who owns `buffer`.
struct JpegSink {
  jpeg_destination_mgr pub;  // first: libjpeg hands back cinfo->dest, which is this
  unsigned char* buffer;
  std::size_t capacity;
};

void jpeg_sink_init(j_compress_ptr) {}

boolean jpeg_sink_grow(j_compress_ptr cinfo) {
  auto* s = reinterpret_cast<JpegSink*>(cinfo->dest);
  const std::size_t bigger = s->capacity * 2;
  auto* grown = static_cast<unsigned char*>(std::realloc(s->buffer, bigger));
  if (grown == nullptr) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
  s->buffer = grown;
  s->pub.next_output_byte = grown + s->capacity;
  s->pub.free_in_buffer = bigger - s->capacity;
  s->capacity = bigger;
  return TRUE;
}

void jpeg_sink_term(j_compress_ptr) {}

struct JpegEncodeState {
  jpeg_compress_struct cinfo;
  JpegError err;
  JpegSink sink;
};

bool jpeg_write_all(JpegEncodeState* s, const std::uint8_t* data, int height, int width, int channels, int quality) {
  if (setjmp(s->err.jump)) return false;
  jpeg_create_compress(&s->cinfo);
  s->cinfo.dest = &s->sink.pub;
  s->cinfo.image_width = static_cast<JDIMENSION>(width);
  s->cinfo.image_height = static_cast<JDIMENSION>(height);
  s->cinfo.input_components = channels;
  s->cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&s->cinfo);
  jpeg_set_quality(&s->cinfo, quality, TRUE);
  jpeg_start_compress(&s->cinfo, TRUE);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * channels;
  while (s->cinfo.next_scanline < s->cinfo.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(data + s->cinfo.next_scanline * row_bytes);
    jpeg_write_scanlines(&s->cinfo, &row, 1);
  }
  jpeg_finish_compress(&s->cinfo);
  return true;
}

struct JpegEncodeGuard {
  JpegEncodeState* s;
  ~JpegEncodeGuard() {
    jpeg_destroy_compress(&s->cinfo);
    std::free(s->sink.buffer);
  }
};

at::Tensor contiguous_hwc(const at::Tensor& image, std::initializer_list<std::int64_t> allowed_channels,
                          const char* what) {
  const bool ok_channels = image.dim() == 3 && std::find(allowed_channels.begin(), allowed_channels.end(),
                                                         image.size(2)) != allowed_channels.end();
  BELLOWS_CHECK_DATA(image.scalar_type() == at::kByte && ok_channels && image.device().is_cpu(),
                     fmt::format("{}: expected a CPU uint8 [H, W, C] image, got {} with shape {}", what,
                                 c10::toString(image.scalar_type()), fmt::join(image.sizes(), "x")),
                     "convert with .to(at::kByte) and permute CHW images to HWC");
  check_size(image.size(0), image.size(1), what);
  return image.contiguous();
}

}  // namespace

at::Tensor decode_png(std::span<const std::uint8_t> bytes, const std::string& name, int channels) {
  check_channels(channels, name);
  PngIo io{bytes.data(), bytes.size(), 0, false, false, nullptr, {}, {}};
  PngReadGuard guard;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_on_error, png_on_warning);
  BELLOWS_CHECK_RESOURCE(guard.png != nullptr, fmt::format("{}: libpng could not start (out of memory?)", name),
                         "free host memory");
  guard.info = png_create_info_struct(guard.png);
  BELLOWS_CHECK_RESOURCE(guard.info != nullptr, fmt::format("{}: libpng could not start (out of memory?)", name),
                         "free host memory");
  png_set_read_fn(guard.png, &io, png_read_memory);

  PngHeader header{};
  if (!png_read_header(guard.png, guard.info, channels, &header)) fail_png(io, name);
  check_size(header.height, header.width, name);
  BELLOWS_CHECK(header.channels == channels && header.row_bytes == std::size_t{header.width} * channels,
                fmt::format("{}: libpng gives {} channels and {} bytes per row after conversion to {}x{}x{}", name,
                            header.channels, header.row_bytes, header.height, header.width, channels),
                "report this bug, with the file");

  at::Tensor out = at::empty({header.height, header.width, channels}, at::kByte);
  std::vector<png_bytep> rows(header.height);
  for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = out.data_ptr<std::uint8_t>() + y * header.row_bytes;
  if (!png_read_pixels(guard.png, rows.data())) fail_png(io, name);
  return out;
}

at::Tensor decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, int channels, int min_height,
                       int min_width) {
  check_channels(channels, name);
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  jpeg_init_error(&err);
  cinfo.err = &err.pub;
  JpegDecompressGuard guard{&cinfo};

  if (!jpeg_open(&cinfo, &err, bytes.data(), bytes.size())) fail_jpeg(err, name);
  check_size(cinfo.image_height, cinfo.image_width, name);
  // A decompression bomb: every 8x8 block of the image costs at least one bit of entropy-coded data, so a file
  // smaller than that cannot hold the image its header declares. libjpeg would first allocate the whole image
  // (a 133-byte progressive JPEG declaring 2^28 pixels took 7 GB and 24 s before failing; found by fuzzing).
  const std::uint64_t blocks = (std::uint64_t{cinfo.image_height} + 7) / 8 * ((std::uint64_t{cinfo.image_width} + 7) / 8);
  BELLOWS_CHECK_DATA(bytes.size() * 8 >= blocks,
                     fmt::format("{}: truncated JPEG: its {} bytes cannot hold the {}x{} image its header declares", name,
                                 bytes.size(), cinfo.image_height, cinfo.image_width),
                     kTruncatedHint);
  // libjpeg's own arrays (a progressive file's coefficients) within a bound: past it, an error instead of memory.
  cinfo.mem->max_memory_to_use = kJpegMemoryLimit;
  // libjpeg converts YCbCr/RGB/gray among each other, not CMYK: take CMYK out and convert it here.
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  cinfo.scale_num =
      static_cast<unsigned>(jpeg_scale_eighths(cinfo.image_height, cinfo.image_width, min_height, min_width));
  cinfo.scale_denom = 8;
  if (!jpeg_start(&cinfo, &err)) fail_jpeg(err, name);

  const std::int64_t height = cinfo.output_height;
  const std::int64_t width = cinfo.output_width;
  const int components = cinfo.output_components;
  BELLOWS_CHECK(components == (cmyk ? 4 : channels),
                fmt::format("{}: libjpeg gives {} components, expected {}", name, components, cmyk ? 4 : channels),
                "report this bug, with the file");
  at::Tensor out = at::empty({height, width, components}, at::kByte);
  if (!jpeg_read_pixels(&cinfo, &err, out.data_ptr<std::uint8_t>(), static_cast<std::size_t>(width) * components)) {
    fail_jpeg(err, name);
  }
  if (!cmyk) return out;
  at::Tensor rgb = cmyk_to_rgb(out, cinfo.saw_Adobe_marker != 0);
  return channels == 3 ? rgb : rgb_to_gray(rgb);
}

at::Tensor decode_image(std::span<const std::uint8_t> bytes, const std::string& name, int channels, int min_h,
                        int min_w) {
  check_channels(channels, name);
  static constexpr std::uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  static constexpr std::uint8_t kJpeg[] = {0xFF, 0xD8, 0xFF};
  if (bytes.size() >= sizeof kPng && std::memcmp(bytes.data(), kPng, sizeof kPng) == 0) {
    return decode_png(bytes, name, channels);
  }
  if (bytes.size() >= sizeof kJpeg && std::memcmp(bytes.data(), kJpeg, sizeof kJpeg) == 0) {
    return decode_jpeg(bytes, name, channels, min_h, min_w);
  }
  BELLOWS_CHECK_DATA(!bytes.empty(), fmt::format("{}: empty file", name), kTruncatedHint);
  const std::size_t n = std::min<std::size_t>(bytes.size(), 4);
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("{}: not a PNG or JPEG file (starts with {:02x})", name, fmt::join(bytes.first(n), " ")),
               "only PNG and JPEG images are read; convert the file or remove it from the data");
}

std::vector<std::uint8_t> encode_png(const at::Tensor& hwc_uint8) {
  const at::Tensor image = contiguous_hwc(hwc_uint8, {1, 2, 3, 4}, "encode_png");
  const auto height = static_cast<png_uint_32>(image.size(0));
  const auto width = static_cast<png_uint_32>(image.size(1));
  const int channels = static_cast<int>(image.size(2));
  static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                        PNG_COLOR_TYPE_RGB_ALPHA};

  std::vector<std::uint8_t> out;
  PngIo io{nullptr, 0, 0, false, false, &out, {}, {}};
  PngWriteGuard guard;
  guard.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, png_on_error, png_on_warning);
  BELLOWS_CHECK_RESOURCE(guard.png != nullptr, "libpng could not start (out of memory?)", "free host memory");
  guard.info = png_create_info_struct(guard.png);
  BELLOWS_CHECK_RESOURCE(guard.info != nullptr, "libpng could not start (out of memory?)", "free host memory");
  png_set_write_fn(guard.png, &io, png_write_memory, png_flush_memory);

  std::vector<png_bytep> rows(height);
  auto* data = const_cast<std::uint8_t*>(image.data_ptr<std::uint8_t>());  // libpng's rows are not const
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = data + std::size_t{y} * width * channels;
  if (!png_write_all(guard.png, guard.info, height, width, kColorTypes[channels - 1], rows.data())) {
    BELLOWS_FAIL(io.out_of_memory ? ErrorKind::kResource : ErrorKind::kInternal,
                 fmt::format("encode_png: libpng error: {}", io.message), "report this bug");
  }
  return out;
}

std::vector<std::uint8_t> encode_jpeg(const at::Tensor& hwc_uint8, int quality) {
  const at::Tensor image = contiguous_hwc(hwc_uint8, {1, 3}, "encode_jpeg");
  BELLOWS_CHECK_DATA(quality >= 1 && quality <= 100, fmt::format("encode_jpeg: quality {}", quality),
                     "give a JPEG quality in 1..100");
  JpegEncodeState s{};
  jpeg_init_error(&s.err);
  s.cinfo.err = &s.err.pub;
  s.sink.capacity = 1 << 16;
  s.sink.buffer = static_cast<unsigned char*>(std::malloc(s.sink.capacity));
  BELLOWS_CHECK_RESOURCE(s.sink.buffer != nullptr, "encode_jpeg: out of memory", "free host memory");
  s.sink.pub.next_output_byte = s.sink.buffer;
  s.sink.pub.free_in_buffer = s.sink.capacity;
  s.sink.pub.init_destination = jpeg_sink_init;
  s.sink.pub.empty_output_buffer = jpeg_sink_grow;
  s.sink.pub.term_destination = jpeg_sink_term;
  JpegEncodeGuard guard{&s};

  if (!jpeg_write_all(&s, image.data_ptr<std::uint8_t>(), static_cast<int>(image.size(0)),
                      static_cast<int>(image.size(1)), static_cast<int>(image.size(2)), quality)) {
    BELLOWS_FAIL(ErrorKind::kInternal, fmt::format("encode_jpeg: libjpeg error: {}", s.err.message), "report this bug");
  }
  const std::size_t used = s.sink.capacity - s.sink.pub.free_in_buffer;
  return std::vector<std::uint8_t>(s.sink.buffer, s.sink.buffer + used);
}

}  // namespace bellows::data
