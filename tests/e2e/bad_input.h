// The bad-input catalogue (bad_input_test.cpp runs it; its rows are in three files): one row per way a user's input can be wrong (each kind of configuration error, each
// data format's corruptions, data/model shape mismatches, missing files, permission denied, checkpoints of
// another model or another format version). Every row runs the real `bellows` and checks the exit code, the
// fragments of stderr that name the offending file, key, line or value, and that nothing half-written is left:
// no ".tmp"/".old-" entry anywhere in the scratch directory and no checkpoint in the output directory.
// Rows that say "found by this catalogue" are regression tests of the defects it found.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <netcdf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bellows/ckpt/checksum.h"
#include "bellows/data/image_codec.h"
#include "bellows/data/npy.h"
#include "run_cli.h"
#include "test_paths.h"

// A namespace of its own: the e2e tests are compiled as a unity build, beside other files' helpers.
namespace bellows::testing::bad_input {

namespace fs = std::filesystem;

// --- files ---

inline void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

inline void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void replace_once(const fs::path& p, const std::string& from, const std::string& to) {
  std::string s = read_bytes(p);
  const auto at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << p;
  s.replace(at, from.size(), to);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// "a,b,y" and `rows` rows of numbers.
inline std::string csv_table(int rows) {
  std::string s = "a,b,y\n";
  for (int r = 0; r < rows; ++r)
    s += std::to_string(0.1 * r) + "," + std::to_string(0.2 * r) + "," + std::to_string(0.3 * r) + "\n";
  return s;
}

// "a,b,y" and `rows` rows of numbers, y a class label 0, 1, ..., classes - 1 in turn.
inline std::string class_table(int rows, int classes) {
  std::string s = "a,b,y\n";
  for (int r = 0; r < rows; ++r) s += std::to_string(0.1 * r) + "," + std::to_string(0.2 * r) + "," + std::to_string(r % classes) + "\n";
  return s;
}

// The same table with line `line` (1-based, the header is line 1) replaced.
inline std::string csv_with_line(int line, const std::string& text) {
  const std::string table = csv_table(20);
  std::string out;
  int n = 0;
  std::size_t start = 0;
  for (std::size_t nl; (nl = table.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += ++n == line ? text : table.substr(start, nl - start);
    out += '\n';
  }
  return out;
}

// An .npy file whose header says `descr` (any dtype string, also ones bellows does not read) and `shape`.
inline std::vector<std::uint8_t> npy_bytes(const std::string& descr, const std::string& shape, std::size_t payload_bytes) {
  std::string header = "{'descr': " + descr + ", 'fortran_order': False, 'shape': " + shape + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += '\x01';
  file += '\x00';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  file.append(payload_bytes, '\0');
  return {file.begin(), file.end()};
}

// x [64, 4] (sin of a ramp), y [64, 1] = the row sums.
inline at::Tensor features() {
  return at::sin(at::arange(64 * 4, at::kFloat).reshape({64, 4}));
}
inline void write_xy(const fs::path& dir) {
  data::write_npy(dir / "x.npy", features());
  data::write_npy(dir / "y.npy", features().sum(1, true));
}

// A NetCDF-4 file with t2m on a time 16 x lat 4 x lon 4 grid.
inline void write_netcdf(const fs::path& path) {
  int nc = 0, dims[3], var = 0;
  ASSERT_EQ(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &nc), NC_NOERR);
  nc_def_dim(nc, "time", 16, &dims[0]);
  nc_def_dim(nc, "lat", 4, &dims[1]);
  nc_def_dim(nc, "lon", 4, &dims[2]);
  nc_def_var(nc, "t2m", NC_FLOAT, 3, dims, &var);
  nc_enddef(nc);
  std::vector<float> values(16 * 4 * 4);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) * 0.1f;
  nc_put_var_float(nc, var, values.data());
  ASSERT_EQ(nc_close(nc), NC_NOERR);
}

// Two classes of 16x16 images, one of them replaced by `bad` (a file name under b/ and its bytes).
inline void write_image_folder(const fs::path& root, const std::string& bad_name, const std::vector<std::uint8_t>& bad) {
  const at::Tensor img =
      at::arange(16 * 16 * 3, at::kInt).remainder(251).to(at::kByte).reshape({16, 16, 3}).contiguous();
  const auto png = data::encode_png(img);
  write_bytes(root / "a" / "1.png", png);
  write_bytes(root / "a" / "2.png", png);
  write_bytes(root / "b" / "3.png", png);
  write_bytes(root / "b" / bad_name, bad);
  // The embedded demo's model keys are the MLP's: an image run needs its own file.
  write_text(root.parent_path() / "images.yaml", "name: images\ndata: {source: image_folder, path: '" + root.string() +
                                                     "', batch_size: 2, val_fraction: 0, shuffle: false}\n"
                                                     "model: {name: resnet, width: 0.125, num_classes: 0}\n");
}

inline std::vector<std::uint8_t> half(const std::vector<std::uint8_t>& bytes) {
  return {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)};
}
inline std::vector<std::uint8_t> test_image(bool jpeg) {
  const at::Tensor img =
      at::arange(16 * 16 * 3, at::kInt).remainder(251).to(at::kByte).reshape({16, 16, 3}).contiguous();
  return jpeg ? data::encode_jpeg(img) : data::encode_png(img);
}

// The demo's MLP (hidden [8]) trained for 4 steps with checkpoints at 2 and 4, in <dir>/src; returns step 4. `extra`:
// more arguments (" checkpoint.layout=sharded": one process writes the sharded layout, one shard).
inline const char* const kDemoData = " data.samples=256 data.batch_size=16 threads=1";
inline fs::path train_demo_checkpoint(const fs::path& dir, const std::string& extra = "") {
  const CliResult r = run_cli("train --output-dir '" + (dir / "src").string() +
                              "' train.max_steps=4 checkpoint.every_n_steps=2 model.hidden=[8]" + kDemoData + extra);
  EXPECT_EQ(r.code, 0) << r.err;
  return dir / "src" / "demo" / "checkpoints" / "step-000000004";
}
inline fs::path train_sharded_demo_checkpoint(const fs::path& dir) {
  return train_demo_checkpoint(dir, " checkpoint.layout=sharded");
}

// Rewrites a checkpoint's manifest.
inline void edit_manifest(const fs::path& checkpoint, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json m = nlohmann::json::parse(read_bytes(checkpoint / "manifest.json"));
  edit(m);
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << m.dump(2) << "\n";
}

// --- a sharded checkpoint broken (issue 45): each on step 4 of train_sharded_demo_checkpoint, step 2 beside it ---

inline const std::string kShard = "shard-00000-of-00001.safetensors";
// The manifest names a shard that is not there.
inline void remove_shard(const fs::path& checkpoint) {
  fs::remove(checkpoint / kShard);
}
// A shard whose bytes differ from its SHA-256 in the manifest.
inline void corrupt_shard(const fs::path& checkpoint) {
  replace_once(checkpoint / kShard, "layers.0.weight", "layers.0.weighT");
}
// Step 2's shard in step 4, the manifest's checksum and size made to agree: only the shard's step tells.
inline void shard_of_another_step(const fs::path& checkpoint) {
  fs::copy_file(checkpoint.parent_path() / "step-000000002" / kShard, checkpoint / kShard,
                fs::copy_options::overwrite_existing);
  const std::string bytes = read_bytes(checkpoint / kShard);
  edit_manifest(checkpoint, [&](nlohmann::json& m) {
    m["files"][kShard] = {{"sha256", ckpt::sha256_hex(bytes)}, {"bytes", bytes.size()}};
  });
}
// A manifest of the next format version.
inline void manifest_of_a_newer_bellows(const fs::path& checkpoint) {
  edit_manifest(checkpoint, [](nlohmann::json& m) { m["format_version"] = 3; });
}

// --- running unprivileged ---

// File permissions deny nothing to root. As root, the CLI runs without the capabilities that bypass them
// (CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from the bounding set: the same uid, so LibTorch under /root
// and the caches stay reachable), or else as the user nobody where that user can run the CLI. The command prefix
// ("" when not root); nullopt when nothing here is denied a read.
inline bool denied(const std::string& prefix, const fs::path& locked) {
  const std::string cmd =
      prefix + " sh -c 'cat \"" + locked.string() + "\" >/dev/null 2>&1 && exit 10; exit 11' >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 11;
}

inline const std::optional<std::string>& unprivileged_prefix() {
  static const std::optional<std::string> prefix = []() -> std::optional<std::string> {
    if (::geteuid() != 0) return "";
    if (std::system("command -v setpriv >/dev/null 2>&1") != 0) return std::nullopt;
    const fs::path dir = scratch_dir("bad_input_probe");
    ::chmod(dir.c_str(), 0755);
    write_text(dir / "locked", "x");
    ::chmod((dir / "locked").c_str(), 0);
    std::optional<std::string> found;
    const std::string without_caps = "setpriv --bounding-set=-dac_override,-dac_read_search";
    const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups";
    if (denied(without_caps, dir / "locked")) {
      found = without_caps;
    } else if (std::system((nobody + " '" + BELLOWS_CLI_PATH + "' --version >/dev/null 2>&1").c_str()) == 0 &&
               denied(nobody, dir / "locked")) {
      found = nobody;
    }
    fs::remove_all(dir);
    return found;
  }();
  return prefix;
}

// --- nothing half-written ---

// Entries under `root` whose names start with one of `prefixes` (recursively; links are not followed).
inline std::vector<fs::path> entries_named(const fs::path& root, const std::vector<std::string>& prefixes) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return found;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    for (const auto& p : prefixes) {
      if (name.rfind(p, 0) == 0) found.push_back(it->path());
    }
  }
  return found;
}

// Checkpoint directories (checkpoints/step-*) under `root`.
inline std::vector<fs::path> checkpoints_under(const fs::path& root) {
  std::vector<fs::path> found;
  for (const auto& p : entries_named(root, {"step-"})) {
    if (p.parent_path().filename() == "checkpoints") found.push_back(p);
  }
  return found;
}

// --- the catalogue ---

struct BadInput {
  std::string name;
  // Writes the case's files into a fresh scratch directory.
  std::function<void(const fs::path& dir)> setup;
  // The CLI arguments; "{dir}" stands for the scratch directory.
  std::string args;
  int code;  // 2 usage/config, 3 input data, 4 resource
  // Each must appear in stderr ("{dir}" as above).
  std::vector<std::string> fragments;
  // Run without the privilege to bypass file permissions (the permission rows).
  bool unprivileged = false;
  // Files the failed run must not have written ("{dir}" as above).
  std::vector<std::string> absent = {};
};

inline std::string expand(std::string s, const fs::path& dir) {
  for (std::size_t at; (at = s.find("{dir}")) != std::string::npos;) s.replace(at, 5, dir.string());
  return s;
}

inline void nothing(const fs::path&) {}

// A training run of a few steps on one thread into {dir}/runs.
inline const std::string kRun =
    " --output-dir '{dir}/runs' threads=1 train.max_steps=2 data.val_fraction=0 data.shuffle=false";
inline const std::string kCsv =
    "train data.source=csv data.path='{dir}/table.csv' data.csv.targets=[y] model.in_features=2 data.batch_size=4" +
    kRun;
inline const std::string kNpy =
    "train data.source=npy data.path='{dir}/x.npy' data.npy.y='{dir}/y.npy' model.in_features=4 data.batch_size=8" +
    kRun;
inline const std::string kNpz =
    "train data.source=npy data.path='{dir}/data.npz' model.in_features=4 data.batch_size=8" + kRun;
inline const std::string kNetcdf =
    "train data.source=netcdf data.path='{dir}/weather.nc' model.in_features=4 model.out_features=4 data.batch_size=4" +
    kRun;
inline const std::string kImages = "train '{dir}/images.yaml'" + kRun;
inline const std::string kText = "train data.source=text_pairs data.path='{dir}/pairs.tsv' data.batch_size=2" + kRun;
// A tool (doctor, plan, bench --matrix) on the CSV run, in the command's own words before the keys.
inline std::string kToolCsv(const std::string& command) {
  return command + " data.source=csv data.path='{dir}/table.csv' data.csv.targets=[y] model.in_features=2 data.batch_size=4 threads=1 "
                   "data.val_fraction=0";
}
inline const std::string kCheckpoint = "{dir}/src/demo/checkpoints/step-000000004";
inline const std::string kResume =
    "train --output-dir '{dir}/runs' train.max_steps=6 model.hidden=[8]" + std::string(kDemoData) + " --resume ";

// The rows of several themes in one list, in order.
inline std::vector<BadInput> joined(std::initializer_list<std::vector<BadInput>> parts) {
  std::vector<BadInput> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// The rows, by what is wrong (each file's rows by theme, joined).
std::vector<BadInput> configuration_rows();  // exit 2: the key, the value, and where it was set
std::vector<BadInput> data_rows();           // exit 3: each data format's corruptions
std::vector<BadInput> run_rows();            // the data against the model, checkpoints, resources
std::vector<BadInput> model_rows();          // a user's TorchScript model (model.name: torchscript)

}  // namespace bellows::testing::bad_input
