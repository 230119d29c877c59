// Data of examples/icon-diffusion (seed 002, workload W5): a synthetic "downscaling" problem. Each sample is
// one coarse cell described by 7 context values, c ~ U(-1, 1)^7, and its fine field on a 16 x 16 grid (256
// values, u and v the cell-centre coordinates in (0, 1)):
//   fine = c0 + c1 (2u - 1) + c2 (2v - 1)                     coarse mean and gradients
//        + 0.6 c3 sin(2 pi u + pi c4) + 0.4 c5 cos(2 pi v)    waves (amplitude, phase)
//        + 0.8 c6 (bump(u, v) - mean bump)                     a centred "orographic" bump
//        + 0.1 z,  z ~ N(0, 1) per fine value                 what the coarse cell does not determine
// The grid average of every term but c0 is zero, so c0 is the cell mean. Files:
//  - train.npz: context float32 [N, 7], fine float32 [N, 256]; N = 20,000 (--quick: 4,096)
//  - heldout.npz: context [M, 7], fine [M, 256] (with noise) and fine_mean [M, 256] (without); M = 512 (256)
// Deterministic: every draw comes from generators seeded by mix_seed(seed, part).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "bellows/data/dataset.h"  // mix_seed
#include "bellows/data/npy.h"      // write_npz
#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kContext = 7;
constexpr std::int64_t kSide = 16;  // fine grid kSide x kSide per coarse cell
constexpr double kNoise = 0.1;

// The noise-free fine fields [rows, 256] of contexts [rows, 7], in float64.
at::Tensor fine_mean(const at::Tensor& c) {
  const at::Tensor centres = (at::arange(kSide, at::kDouble) + 0.5) / kSide;
  const at::Tensor v = centres.view({kSide, 1}).expand({kSide, kSide}).reshape({1, -1});  // row-major: v slow
  const at::Tensor u = centres.view({1, kSide}).expand({kSide, kSide}).reshape({1, -1});  //            u fast
  at::Tensor bump = at::exp(-((u - 0.5).square() + (v - 0.5).square()) / 0.02);
  bump = bump - bump.mean();
  auto col = [&](std::int64_t i) { return c.select(1, i).unsqueeze(1); };
  constexpr double pi = std::numbers::pi;
  return col(0) + col(1) * (2 * u - 1) + col(2) * (2 * v - 1) + 0.6 * col(3) * at::sin(2 * pi * u + pi * col(4)) +
         0.4 * col(5) * at::cos(2 * pi * v) + 0.8 * col(6) * bump;
}

struct Part {
  at::Tensor context, mean, fine;
};

Part make_part(std::int64_t rows, std::uint64_t seed, std::uint64_t part) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(data::mix_seed(seed, part));
  Part p;
  p.context = at::rand({rows, kContext}, g, at::kDouble) * 2 - 1;
  p.mean = fine_mean(p.context);
  p.fine = p.mean + kNoise * at::randn({rows, kSide * kSide}, g, at::kDouble);
  return p;
}

}  // namespace

std::string generate_icon_diffusion(const GenOptions& options) {
  std::error_code ec;
  fs::create_directories(options.out, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", options.out.string(), ec.message()),
                         "check the path and its permissions");
  const std::int64_t train_rows = options.quick ? 4096 : 20000, heldout_rows = options.quick ? 256 : 512;
  const Part train = make_part(train_rows, options.seed, 1);
  const Part heldout = make_part(heldout_rows, options.seed, 2);
  data::write_npz(options.out / "train.npz",
                  {{"context", train.context.to(at::kFloat)}, {"fine", train.fine.to(at::kFloat)}});
  data::write_npz(options.out / "heldout.npz", {{"context", heldout.context.to(at::kFloat)},
                                                {"fine", heldout.fine.to(at::kFloat)},
                                                {"fine_mean", heldout.mean.to(at::kFloat)}});
  return fmt::format(
      "icon-diffusion: {} train and {} held-out cells, 7 context values -> 16x16 fine values (noise {}) in {}",
      train_rows, heldout_rows, kNoise, options.out.string());
}

}  // namespace bellows::example_data
