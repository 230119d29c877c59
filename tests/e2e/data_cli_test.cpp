// `bellows bench data` and `bellows train` over real data files: reports, training from CSV, and corrupt
// inputs of every format failing with exit code 3 and the file (and position) named.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netcdf.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bellows/data/image_codec.h"
#include "bellows/data/npy.h"
#include "run_cli.h"

namespace bellows::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void truncate_to_half(const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); }

// y = sum of the features: an MLP learns it quickly.
std::string csv_table(int rows, int features) {
  std::string s;
  for (int f = 0; f < features; ++f) s += "f" + std::to_string(f) + ",";
  s += "y\n";
  for (int r = 0; r < rows; ++r) {
    double y = 0;
    for (int f = 0; f < features; ++f) {
      const double v = ((r * 31 + f * 17) % 23) / 23.0 - 0.5;
      y += v;
      s += std::to_string(v) + ",";
    }
    s += std::to_string(y) + "\n";
  }
  return s;
}

std::string csv_config(const fs::path& csv, const fs::path& out) {
  return "name: csv\noutput_dir: " + out.string() + "\ndata:\n  source: csv\n  path: " + csv.string() +
         "\n  batch_size: 16\n  csv:\n    targets: [y]\nmodel:\n  name: mlp\n  in_features: 4\n  hidden: [16]\n  out_features: 1\n"
         "train:\n  epochs: 3\n  max_steps: 30\n  log_every_n_steps: 10\n";
}

TEST(DataCli, BenchDataJsonReportsEverySettingOfTheSweep) {
  const CliResult r = run_cli("bench data data.samples=4096 data.batch_size=64 --json --batches 6 --warmup 2 --sweep-workers 0,1,2 --sweep-prefetch 2,4");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_THAT(j["dataset"].get<std::string>(), HasSubstr("synthetic regression"));
  EXPECT_EQ(j["batch_size"], 64);
  // configured (1 planned worker, prefetch 4) + sync + 1x2 + 2x2 (minus the configured one if repeated)
  ASSERT_GE(j["rows"].size(), 5u);
  EXPECT_EQ(j["rows"][0]["label"], "configured");
  bool saw_sync = false;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["batches"], 6);
    EXPECT_EQ(row["samples"], 6 * 64);
    EXPECT_EQ(row["bytes"], 6 * 64 * (64 + 1) * 4);  // x float32 [64] + y float32 [1] per sample
    EXPECT_GT(row["batches_per_second"].get<double>(), 0);
    for (const char* stage : {"read", "decode", "transform", "collate", "copy"}) EXPECT_TRUE(row["stage_ms_per_batch"].contains(stage));
    if (row["synchronous"].get<bool>()) {
      saw_sync = true;
      EXPECT_EQ(row["workers"], 0);
      EXPECT_EQ(row["worker_utilisation"], 0);
    }
  }
  EXPECT_TRUE(saw_sync);
  EXPECT_LT(j["best"].get<std::size_t>(), j["rows"].size());
}

TEST(DataCli, BenchDataTableForTheTerminal) {
  const CliResult r = run_cli("bench data data.samples=1024 --batches 3 --warmup 0 --no-sweep");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ms/batch"));
  EXPECT_THAT(r.out, HasSubstr("configured"));
  EXPECT_THAT(r.out, HasSubstr("fastest (*)"));
  EXPECT_EQ(run_cli("bench data --batches x").code, 2);
}

TEST(DataCli, TrainsFromACsvFileWithAndWithoutPrefetch) {
  const fs::path dir = scratch_dir("csv_train");
  write_text(dir / "table.csv", csv_table(400, 4));
  write_text(dir / "run.yaml", csv_config(dir / "table.csv", dir / "runs"));
  for (const std::string flags : {"", " --workers 0", " data.use_prefetch=false"}) {
    const CliResult r = run_cli("train '" + (dir / "run.yaml").string() + "'" + flags);
    ASSERT_EQ(r.code, 0) << flags << "\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("step 30"));
  }
  const std::string metrics = slurp(dir / "runs" / "csv" / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"type\":\"end\""));
}

TEST(DataCli, ModelWidthMustMatchTheData) {
  const fs::path dir = scratch_dir("csv_width");
  write_text(dir / "table.csv", csv_table(50, 3));
  write_text(dir / "run.yaml", csv_config(dir / "table.csv", dir / "runs"));
  const CliResult r = run_cli("train '" + (dir / "run.yaml").string() + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("model.in_features is 4"));
  EXPECT_THAT(r.err, HasSubstr("samples have 3 features"));
}

// model.in_features left out: the data's width (3) is the model's, and the plan and the run's config say so.
TEST(DataCli, ModelWidthIsTakenFromTheDataWhenNotSet) {
  const fs::path dir = scratch_dir("csv_width_auto");
  write_text(dir / "table.csv", csv_table(50, 3));
  std::string yaml = csv_config(dir / "table.csv", dir / "runs");
  const std::string given = "  in_features: 4\n";
  ASSERT_NE(yaml.find(given), std::string::npos);
  yaml.erase(yaml.find(given), given.size());
  write_text(dir / "run.yaml", yaml);
  const CliResult r = run_cli("train '" + (dir / "run.yaml").string() + "' train.max_steps=3");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(slurp(dir / "runs" / "csv" / "plan.json"));
  bool row = false;
  for (const auto& e : plan["entries"]) {
    if (e["key"] == "model.in_features") {
      row = true;
      EXPECT_EQ(e["value"], "3");
      EXPECT_THAT(e["reason"].get<std::string>(), HasSubstr("not set: the width of the data's inputs (x [3]"));
    }
  }
  EXPECT_TRUE(row) << plan.dump(2);
  EXPECT_THAT(slurp(dir / "runs" / "csv" / "config.resolved.yaml"), HasSubstr("in_features: 3"));
  EXPECT_THAT(r.out, HasSubstr("model.in_features"));  // the console's plan table
}

// Categorical values become 0, 1, ... in byte order of the distinct values; the run directory's categories.json
// holds each column's table (docs/data.md), so a user can build `predict` inputs.
TEST(DataCli, CategoricalColumnsMapInSortedOrderAndTheTableIsWritten) {
  const fs::path dir = scratch_dir("csv_categorical");
  std::string csv = "size,color,kind\n";
  const char* colors[] = {"red", "blue", "Green"};
  const char* kinds[] = {"b", "a"};
  for (int i = 0; i < 40; ++i) csv += fmt::format("{},{},{}\n", 0.1 * i, colors[i % 3], kinds[i % 2]);
  write_text(dir / "t.csv", csv);
  write_text(dir / "run.yaml", "name: cat\noutput_dir: " + (dir / "runs").string() + "\ndata:\n  source: csv\n  path: " +
                                   (dir / "t.csv").string() + "\n  batch_size: 8\n  csv:\n    targets: [kind]\n    categorical: [color, kind]\n"
                                   "model:\n  name: mlp\n  task: classification\n  hidden: [8]\n  out_features: 2\ntrain:\n  max_steps: 2\n");
  const CliResult r = run_cli("train '" + (dir / "run.yaml").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "runs" / "cat" / "categories.json"));
  EXPECT_EQ(j["color"], nlohmann::json({"Green", "blue", "red"}));  // byte order: uppercase first
  EXPECT_EQ(j["kind"], nlohmann::json({"a", "b"}));
  EXPECT_FALSE(j.contains("size"));
}

CliResult bench(const std::string& overrides) { return run_cli("bench data " + overrides + " --no-sweep --batches 2 --warmup 0"); }

TEST(DataCli, CorruptCsvExits3NamingFileAndLine) {
  const fs::path dir = scratch_dir("bad_csv");
  write_text(dir / "bad.csv", "a,b,y\n1,2,3\n4,oops,6\n");
  CliResult r = bench("data.source=csv data.path=" + (dir / "bad.csv").string() + " data.csv.targets=[y]");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bad.csv"));
  EXPECT_THAT(r.err, HasSubstr("line 3"));
  EXPECT_THAT(r.err, HasSubstr("list it in data.csv.missing_tokens and choose data.csv.missing"));  // a key that exists:
  // a sentinel listed there is missing, and the policy decides (drop: the row goes; the other rows are read).
  write_text(dir / "sentinel.csv", "a,b,y\n1,2,3\n4,n.a.,6\n7,8,9\n");
  r = bench("data.source=csv data.path=" + (dir / "sentinel.csv").string() + " data.csv.targets=[y]");
  EXPECT_EQ(r.code, 3) << r.err;
  r = bench("data.source=csv data.path=" + (dir / "sentinel.csv").string() +
            " data.csv.targets=[y] data.csv.missing_tokens=[n.a.] data.csv.missing=drop data.batch_size=1");
  EXPECT_EQ(r.code, 0) << r.err;
  write_text(dir / "short.csv", "a,b,y\n1,2,3\n4,5");
  r = bench("data.source=csv data.path=" + (dir / "short.csv").string() + " data.csv.targets=[y]");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("short.csv line 3"));
}

TEST(DataCli, CorruptNumpyExits3NamingTheFile) {
  const fs::path dir = scratch_dir("bad_npy");
  data::write_npy(dir / "x.npy", at::ones({100, 8}));
  truncate_to_half(dir / "x.npy");
  CliResult r = bench("data.source=npy data.path=" + (dir / "x.npy").string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("x.npy"));
  write_text(dir / "garbage.npz", "PK this is not a zip archive at all");
  r = bench("data.source=npy data.path=" + (dir / "garbage.npz").string());
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("garbage.npz"));
}

TEST(DataCli, CorruptNetcdfExits3NamingTheFile) {
  const fs::path dir = scratch_dir("bad_nc");
  const std::string path = (dir / "weather.nc").string();
  int nc = 0, dims[3], var = 0;
  ASSERT_EQ(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &nc), NC_NOERR);
  nc_def_dim(nc, "time", 16, &dims[0]);
  nc_def_dim(nc, "lat", 8, &dims[1]);
  nc_def_dim(nc, "lon", 8, &dims[2]);
  nc_def_var(nc, "t2m", NC_FLOAT, 3, dims, &var);
  nc_enddef(nc);
  std::vector<float> values(16 * 8 * 8);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97);
  nc_put_var_float(nc, var, values.data());
  ASSERT_EQ(nc_close(nc), NC_NOERR);
  // The intact file works...
  CliResult r = bench("data.source=netcdf data.path=" + path + " data.batch_size=4");
  ASSERT_EQ(r.code, 0) << r.err;
  // ...a truncated copy does not.
  fs::copy_file(path, dir / "cut.nc");
  truncate_to_half(dir / "cut.nc");
  r = bench("data.source=netcdf data.path=" + (dir / "cut.nc").string() + " data.batch_size=4");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cut.nc"));
}

void image_folder_with_one_bad_file(const fs::path& root, const std::string& ext) {
  const at::Tensor img = at::arange(16 * 16 * 3, at::kInt).remainder(251).to(at::kByte).reshape({16, 16, 3}).contiguous();
  const auto bytes = ext == "png" ? data::encode_png(img) : data::encode_jpeg(img);
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  write_bytes(root / "a" / ("good." + ext), bytes);
  write_bytes(root / "b" / ("bad." + ext), std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)));
}

TEST(DataCli, CorruptImagesExit3NamingTheFile) {
  for (const std::string ext : {"png", "jpg"}) {
    const fs::path root = scratch_dir("bad_images_" + ext);
    image_folder_with_one_bad_file(root, ext);
    const CliResult r = bench("data.source=image_folder data.path=" + root.string() + " data.batch_size=2 data.shuffle=false");
    EXPECT_EQ(r.code, 3) << ext << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("bad." + ext)) << r.err;
  }
}

}  // namespace
}  // namespace bellows::testing
