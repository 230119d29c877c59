// Data of examples/temporal (seed 003, workloads W1-W3):
//  - features.csv: 64 standard-normal features f0..f63 (4 decimals) and a target y = a fixed random teacher
//    (a linear part plus a saturating tanh layer of 32 units; the best linear fit leaves about a fifth of the
//    variance), standardised, plus noise of std 0.05: the MLP's table (W1). 200,000 rows; --quick: 5,000.
//  - series.npy: float32 [S, T, 16], S independent runs of one noisy linear system: 6 damped oscillators
//    (frequencies 0.05 to 0.6 rad/step, damping 0.97 to 0.995 per step) driven by gaussian noise, observed
//    through a fixed random 16x6 mixing with a mild tanh nonlinearity and observation noise, each column
//    standardised. The next steps follow from the recent history (the oscillators' phases), not from the last
//    row alone: the LSTM's and Transformer's windows (W2, W3). S x T = 32 x 8192; --quick: 8 x 1024.
// Deterministic: every draw comes from generators seeded by mix_seed(seed, part).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "bellows/data/dataset.h"  // mix_seed
#include "bellows/data/npy.h"      // write_npy
#include "bellows/util/atomic_file.h"  // defines: AtomicFileWriter
#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kTableFeatures = 64;
constexpr std::int64_t kSeriesFeatures = 16;
constexpr std::int64_t kOscillators = 6;

at::Generator generator(std::uint64_t seed, std::uint64_t part) {
  return at::make_generator<at::CPUGeneratorImpl>(data::mix_seed(seed, part));
}

// --- features.csv ---

void write_table(const fs::path& path, std::int64_t rows, std::uint64_t seed) {
  at::Generator g = generator(seed, 1);
  // The teacher, fixed by the seed: y = x.a / 8 + tanh(x W1 / 3) . w2, standardised over the rows.
  const at::Tensor a = at::randn({kTableFeatures}, g, at::kDouble);
  const at::Tensor w1 = at::randn({kTableFeatures, 32}, g, at::kDouble);
  const at::Tensor w2 = at::randn({32}, g, at::kDouble);
  // Rounded to the 4 decimals written, so the file's features give exactly its targets (up to the noise).
  const at::Tensor x = (at::randn({rows, kTableFeatures}, g, at::kDouble) * 1e4).round() / 1e4;
  at::Tensor y = x.matmul(a) / 8 + at::tanh(x.matmul(w1) / 3).matmul(w2);
  y = (y - y.mean()) / y.std() + at::randn({rows}, g, at::kDouble) * 0.05;

  AtomicFileWriter file(path);  // kResource errors name the file; a failed write leaves no partial one
  fmt::memory_buffer line;
  for (std::int64_t f = 0; f < kTableFeatures; ++f) fmt::format_to(std::back_inserter(line), "f{},", f);
  fmt::format_to(std::back_inserter(line), "y\n");
  const double* xs = x.const_data_ptr<double>();
  const double* ys = y.const_data_ptr<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t f = 0; f < kTableFeatures; ++f)
      fmt::format_to(std::back_inserter(line), "{:.4f},", xs[r * kTableFeatures + f]);
    fmt::format_to(std::back_inserter(line), "{:.5f}\n", ys[r]);
    if (line.size() > (1 << 20) || r + 1 == rows) {
      file.write(line.data(), line.size());
      line.clear();
    }
  }
  file.commit();
}

// --- series.npy ---

at::Tensor make_series(std::int64_t series, std::int64_t steps, std::uint64_t seed) {
  at::Generator g = generator(seed, 2);
  // The system, shared by all runs: per oscillator a rotation by omega with damping rho.
  const at::Tensor omega = at::rand({kOscillators}, g, at::kDouble) * 0.55 + 0.05;
  const at::Tensor rho = at::rand({kOscillators}, g, at::kDouble) * 0.025 + 0.97;
  const at::Tensor mixing =
      at::randn({kOscillators, kSeriesFeatures}, g, at::kDouble) / std::sqrt(double(kOscillators));
  const std::vector<double> w(omega.const_data_ptr<double>(), omega.const_data_ptr<double>() + kOscillators);
  const std::vector<double> r(rho.const_data_ptr<double>(), rho.const_data_ptr<double>() + kOscillators);

  // Driving noise of std sqrt(1 - rho^2) keeps each oscillator's stationary variance at 1; the runs start
  // from that stationary distribution.
  const at::Tensor drive = at::randn({series, steps, kOscillators, 2}, g, at::kDouble);
  at::Tensor state = at::randn({series, kOscillators, 2}, g, at::kDouble);
  const double* d = drive.const_data_ptr<double>();
  double* z = state.data_ptr<double>();
  at::Tensor position = at::empty({series, steps, kOscillators}, at::kDouble);
  double* p = position.data_ptr<double>();
  for (std::int64_t s = 0; s < series; ++s) {
    for (std::int64_t t = 0; t < steps; ++t) {
      for (std::int64_t k = 0; k < kOscillators; ++k) {
        double* zk = z + (s * kOscillators + k) * 2;
        const double* dk = d + ((s * steps + t) * kOscillators + k) * 2;
        const double c = std::cos(w[k]), sn = std::sin(w[k]), sigma = std::sqrt(1 - r[k] * r[k]);
        const double z0 = r[k] * (c * zk[0] - sn * zk[1]) + sigma * dk[0];
        const double z1 = r[k] * (sn * zk[0] + c * zk[1]) + sigma * dk[1];
        zk[0] = z0;
        zk[1] = z1;
        p[(s * steps + t) * kOscillators + k] = z0;
      }
    }
  }
  at::Tensor x = position.matmul(mixing);
  x = x + 0.3 * at::tanh(x) + at::randn(x.sizes(), g, at::kDouble) * 0.05;
  const at::Tensor flat = x.view({-1, kSeriesFeatures});
  x = (x - flat.mean(0)) / flat.std(0);
  return x.to(at::kFloat).contiguous();
}

}  // namespace

std::string generate_temporal(const GenOptions& options) {
  const std::int64_t rows = options.quick ? 5000 : 200000;
  const std::int64_t series = options.quick ? 8 : 32;
  const std::int64_t steps = options.quick ? 1024 : 8192;
  std::error_code ec;
  fs::create_directories(options.out, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create {}: {}", options.out.string(), ec.message()),
                         "check the output directory");
  write_table(options.out / "features.csv", rows, options.seed);
  data::write_npy(options.out / "series.npy", make_series(series, steps, options.seed));
  return fmt::format("temporal: {} (rows {} x {} features + y) and {} (float32 [{}, {}, {}]) in {}", "features.csv",
                     rows, kTableFeatures, "series.npy", series, steps, kSeriesFeatures, options.out.string());
}

}  // namespace bellows::example_data
