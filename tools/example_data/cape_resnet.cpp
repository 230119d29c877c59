// Data of examples/cape-resnet (seed 001, workload W4): a PNG image folder, train/<class>/NNNN.png and
// val/<class>/NNNN.png, 10 classes of synthetic shapes and textures (stripes three ways, checkerboard, disk,
// ring, square, cross, triangle, dot grid) with random size, position, period, phase and colours plus pixel
// noise, so that a ResNet has to learn shape, not colour. 3x128x128, 100 + 20 images per class; --quick: 64x64,
// 32 + 8 per class. Deterministic: every image is drawn from its own generator seeded by (seed, split, index).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <fstream>
#include <numbers>

#include "bellows/data/dataset.h"      // mix_seed
#include "bellows/data/image_codec.h"  // encode_png
#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 10> kClasses = {
    "checkerboard",       "cross", "diagonal_stripes", "disk",     "dot_grid",
    "horizontal_stripes", "ring",  "square",           "triangle", "vertical_stripes"};

// Uniform draws in [lo, hi) from one image's generator.
struct Draw {
  at::Generator g;
  double operator()(double lo, double hi) { return lo + (hi - lo) * at::rand({1}, g, at::kDouble).item<double>(); }
};

// The mask (1 on the shape, 0 elsewhere) of class `name` on the grid y, x in [0, 1).
at::Tensor shape_mask(const std::string& name, const at::Tensor& y, const at::Tensor& x, Draw& r) {
  constexpr double two_pi = 2 * std::numbers::pi;
  const double period = r(0.08, 0.2), phase = r(0, 1);
  const double cy = r(0.3, 0.7), cx = r(0.3, 0.7), size = r(0.14, 0.26);
  const at::Tensor dy = y - cy, dx = x - cx;
  if (name == "horizontal_stripes") return at::sin(two_pi * (y / period + phase)) > 0;
  if (name == "vertical_stripes") return at::sin(two_pi * (x / period + phase)) > 0;
  if (name == "diagonal_stripes") return at::sin(two_pi * ((x + y) / (period * std::numbers::sqrt2) + phase)) > 0;
  if (name == "checkerboard") {
    return (at::sin(two_pi * (y / period + phase)) * at::sin(two_pi * (x / period + phase))) > 0;
  }
  const at::Tensor dist = at::sqrt(dy * dy + dx * dx);
  if (name == "disk") return dist < size;
  if (name == "ring") return (dist < size) & (dist > size * r(0.55, 0.75));
  if (name == "square") return (dx.abs() < size * 0.9) & (dy.abs() < size * 0.9);
  if (name == "cross") {
    const double arm = size * r(0.25, 0.35);
    return ((dx.abs() < arm) & (dy.abs() < size)) | ((dy.abs() < arm) & (dx.abs() < size));
  }
  if (name == "triangle") {  // apex up: the half-width grows from 0 at the top to `size` at the base
    const at::Tensor depth = dy + size;
    return (depth > 0) & (dy < size) & (dx.abs() < depth / 2);
  }
  if (name == "dot_grid") {
    const double p = period * 1.5;
    const at::Tensor gy = at::remainder(y / p + phase, 1.0) - 0.5, gx = at::remainder(x / p + phase, 1.0) - 0.5;
    return at::sqrt(gy * gy + gx * gx) < 0.28;
  }
  BELLOWS_FAIL(ErrorKind::kInternal, fmt::format("cape-resnet: no pattern for class '{}'", name), "report this bug");
}

// uint8 [side, side, 3]: the class's shape in one random colour on another, plus gaussian noise.
at::Tensor draw_image(const std::string& name, std::int64_t side, std::uint64_t seed) {
  Draw r{at::make_generator<at::CPUGeneratorImpl>(seed)};
  const at::Tensor axis = (at::arange(side, at::kDouble) + 0.5) / static_cast<double>(side);
  const at::Tensor y = axis.view({side, 1}).expand({side, side}), x = axis.view({1, side}).expand({side, side});
  const at::Tensor mask = shape_mask(name, y, x, r).to(at::kDouble).unsqueeze(-1);  // [side, side, 1]
  // Colours at least 0.35 apart in brightness on average, either one the brighter: contrast, but no colour cue.
  at::Tensor fg = at::rand({3}, r.g, at::kDouble) * 0.45 + 0.55;
  at::Tensor bg = at::rand({3}, r.g, at::kDouble) * 0.45;
  if (r(0, 1) < 0.5) std::swap(fg, bg);
  const at::Tensor noise = at::randn({side, side, 3}, r.g, at::kDouble) * 0.06;
  const at::Tensor image = mask * fg + (1 - mask) * bg + noise;
  return (image * 255).round().clamp(0, 255).to(at::kByte);
}

void write_png(const fs::path& path, const at::Tensor& hwc) {
  const std::vector<std::uint8_t> bytes = data::encode_png(hwc);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  BELLOWS_CHECK_RESOURCE(out.good(), fmt::format("cannot write {}", path.string()),
                         "check free disk space and permissions");
}

}  // namespace

std::string generate_cape_resnet(const GenOptions& options) {
  const std::int64_t side = options.quick ? 64 : 128;
  const std::int64_t train_per_class = options.quick ? 32 : 100;
  const std::int64_t val_per_class = options.quick ? 8 : 20;
  std::int64_t written = 0;
  for (const auto& [split, per_class, split_id] :
       {std::tuple{"train", train_per_class, 0ULL}, std::tuple{"val", val_per_class, 1ULL}}) {
    for (std::size_t c = 0; c < kClasses.size(); ++c) {
      const fs::path dir = options.out / split / kClasses[c];
      std::error_code ec;
      fs::create_directories(dir, ec);
      BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", dir.string(), ec.message()),
                             "check the output directory");
      for (std::int64_t i = 0; i < per_class; ++i) {
        const std::uint64_t seed =
            data::mix_seed(data::mix_seed(options.seed, split_id), c * 100000 + static_cast<std::uint64_t>(i));
        write_png(dir / fmt::format("{:04d}.png", i), draw_image(kClasses[c], side, seed));
        ++written;
      }
    }
  }
  return fmt::format(
      "cape-resnet: {} PNG images 3x{}x{} in {}/train ({} per class) and {}/val ({} per class), {} classes", written,
      side, side, options.out.string(), train_per_class, options.out.string(), val_per_class, kClasses.size());
}

}  // namespace bellows::example_data
