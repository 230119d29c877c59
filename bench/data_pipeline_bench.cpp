// Benchmark: does prefetching pay on an image-folder workload where loading costs about as much as compute?
//
// 1. Writes a deterministic PNG image folder (10 classes) unless it exists.
// 2. Measures the loading cost per batch (synchronous loader, no model) and the compute cost per training
//    step of a small CNN, then sizes the CNN's width so the two are about equal on this machine.
// 3. Trains with the bellows Trainer, alternating trials: synchronous loading (data.use_prefetch: false)
//    and one worker with a prefetch queue. Compute runs on one intra-op thread, so on a 2-core machine the
//    worker has a core of its own. Reports steps/s per trial, the medians and their ratio.
//
//   build/bin/bellows_bench_data [--images N] [--size S] [--batch B] [--steps K] [--trials T] [--dir PATH]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "bellows/data/image_codec.h"
#include "bellows/data/image_folder.h"
#include "bellows/data/loader.h"
#include "bellows/models/tasks.h"
#include "bellows/train/trainer.h"

namespace fs = std::filesystem;
using namespace bellows;

namespace {

struct Args {
  std::int64_t images = 640, size = 128, batch = 32, steps = 20, trials = 5;
  fs::path dir = fs::temp_directory_path() / "bellows-bench-images";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--images") a.images = std::stoll(v);
    else if (k == "--size") a.size = std::stoll(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--trials") a.trials = std::stoll(v);
    else if (k == "--dir") a.dir = v;
    else throw std::runtime_error("unknown flag " + k);
  }
  return a;
}

// Smooth gradients plus noise: PNG-compressible like photographs, not trivially so.
void write_images(const Args& a) {
  const fs::path stamp = a.dir / fmt::format(".complete-{}-{}", a.images, a.size);
  if (fs::exists(stamp)) return;
  fs::remove_all(a.dir);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  const at::Tensor yy = at::linspace(0, 1, a.size).view({a.size, 1, 1});
  const at::Tensor xx = at::linspace(0, 1, a.size).view({1, a.size, 1});
  for (std::int64_t i = 0; i < a.images; ++i) {
    const std::int64_t label = i % 10;
    const fs::path dir = a.dir / fmt::format("class{}", label);
    fs::create_directories(dir);
    const at::Tensor base = at::rand({1, 1, 3}, gen) * 255;
    const at::Tensor img = (base * (0.5 + 0.5 * xx) * (0.5 + 0.5 * yy) + at::randn({a.size, a.size, 3}, gen) * 12)
                               .clamp(0, 255).to(at::kByte).contiguous();
    const auto png = data::encode_png(img);
    std::ofstream(dir / fmt::format("{:05}.png", i), std::ios::binary).write(reinterpret_cast<const char*>(png.data()), png.size());
  }
  std::ofstream(stamp) << "ok\n";
}

torch::nn::Sequential make_cnn(std::int64_t width) {
  using namespace torch::nn;
  return Sequential(Conv2d(Conv2dOptions(3, width, 3).stride(2).padding(1)), ReLU(),
                    Conv2d(Conv2dOptions(width, 2 * width, 3).stride(2).padding(1)), ReLU(),
                    Conv2d(Conv2dOptions(2 * width, 2 * width, 3).stride(2).padding(1)), ReLU(),
                    AdaptiveAvgPool2d(AdaptiveAvgPool2dOptions(1)), Flatten(), Linear(2 * width, 10));
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::shared_ptr<data::Loader> make_loader(const std::shared_ptr<data::ImageFolderDataset>& ds, const Args& a, bool prefetch) {
  data::LoaderOptions o;
  o.batch_size = a.batch;
  o.drop_last = true;
  o.use_prefetch = prefetch;
  o.workers = prefetch ? 1 : 0;
  o.prefetch = 4;
  data::SamplerOptions shuffled;
  shuffled.kind = "shuffle";
  shuffled.seed = 0;
  return std::make_shared<data::Loader>(ds, data::Sampler(ds->size(), shuffled), o);
}

// Seconds per training step of a CNN of `width` on one fixed batch (no loading).
double compute_cost(std::int64_t width, const data::Batch& batch, int reps) {
  auto model = make_cnn(width);
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto step = [&] {
    opt.zero_grad();
    auto loss = at::cross_entropy_loss(model->forward(batch.at("x")), batch.at("y"));
    loss.backward();
    opt.step();
  };
  step();
  const double t0 = now();
  for (int i = 0; i < reps; ++i) step();
  return (now() - t0) / reps;
}

double train_steps_per_second(const std::shared_ptr<data::ImageFolderDataset>& ds, const Args& a, bool prefetch, std::int64_t width) {
  auto loader = make_loader(ds, a, prefetch);
  auto model = std::make_shared<torch::nn::Sequential>(make_cnn(width));
  auto task = models::make_classification_task(
      [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<torch::nn::SequentialImpl&>(m).forward(x); });
  train::TrainerOptions o;
  o.epochs = 100;
  o.max_steps = a.steps;
  o.optimizer.type = "sgd";
  o.optimizer.lr = 0.01;
  o.log_every_n_steps = a.steps;
  train::Trainer trainer(model->ptr(), task, o);
  const train::FitResult r = trainer.fit(*loader);
  return static_cast<double>(r.steps) / r.seconds;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  at::set_num_threads(1);
  write_images(a);
  data::ImageFolderOptions io;
  io.root = a.dir;
  io.hflip = true;
  auto ds = data::make_image_folder_dataset(io);
  fmt::print("dataset: {}\nbatch {}, {} steps per trial, {} trials per setting, compute on 1 intra-op thread, "
             "{} hardware threads\n", ds->name(), a.batch, a.steps, a.trials, std::thread::hardware_concurrency());

  // Loading cost per batch, synchronously, no model.
  auto sync = make_loader(ds, a, false);
  sync->start_epoch(0);
  data::Batch sample = *sync->next();
  sync->reset_stats();
  for (int i = 0; i < 8; ++i) sync->next();
  const data::LoaderStats ls = sync->stats();
  const double load = ls.wall_seconds / ls.batches;
  const auto& st = ls.stages;
  fmt::print("loading: {:.1f} ms/batch (read {:.1f}, decode {:.1f}, transform {:.1f}, collate {:.1f} ms)\n", 1e3 * load,
             1e3 * st.read / ls.batches, 1e3 * st.decode / ls.batches, 1e3 * st.transform / ls.batches, 1e3 * st.collate / ls.batches);

  // Size the CNN so one step costs about one batch's loading: the width whose step time is closest to the
  // loading time (in ratio), trying widths in increasing order until compute exceeds loading.
  std::int64_t width = 4;
  double c = compute_cost(width, sample, 3);
  for (std::int64_t w : {6, 8, 12, 16, 24, 32, 48, 64, 96, 128}) {
    if (c >= load) break;
    const double cw = compute_cost(w, sample, 3);
    if (std::abs(std::log(cw / load)) < std::abs(std::log(c / load))) {
      width = w;
      c = cw;
    }
    if (cw >= load) break;
  }
  fmt::print("compute: CNN width {} -> {:.1f} ms/step; loading/compute = {:.2f}\n", width, 1e3 * c, load / c);

  std::vector<double> off, on;
  for (std::int64_t t = 0; t < a.trials; ++t) {  // alternating A B A B
    off.push_back(train_steps_per_second(ds, a, false, width));
    on.push_back(train_steps_per_second(ds, a, true, width));
    fmt::print("trial {}: synchronous {:.2f} steps/s, prefetch (1 worker, depth 4) {:.2f} steps/s\n", t + 1, off.back(), on.back());
  }
  const double m_off = median(off), m_on = median(on);
  fmt::print("median: synchronous {:.2f} steps/s [{:.2f}..{:.2f}], prefetch {:.2f} steps/s [{:.2f}..{:.2f}]\n", m_off,
             *std::min_element(off.begin(), off.end()), *std::max_element(off.begin(), off.end()), m_on,
             *std::min_element(on.begin(), on.end()), *std::max_element(on.begin(), on.end()));
  fmt::print("speed-up with prefetch: {:.2f}x (target >= 1.3x: {})\n", m_on / m_off, m_on / m_off >= 1.3 ? "met" : "NOT met");
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "bellows_bench_data: {}\n", e.what());
  return 1;
}
