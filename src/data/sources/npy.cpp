// data.source: npy -- NumPy .npy/.npz arrays (memory-mapped), as rows or as a series for sliding windows.
#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/data/build.h"      // defines: data_options, npy_extra_arrays
#include "bellows/data/npy.h"
#include "bellows/data/npy_dataset.h"
#include "bellows/data/source_registry.h"
#include "bellows/util/check.h"

namespace bellows::data {
namespace {

// The part of data.npy.y that names a file (config::PathPart): none beside an .npz data.path (y is an array there) or
// for the default "y"; the file of file.npz:array; else all of it. Called while the config is validated: every key has
// its value (data.path too, declared with the npy keys by add_dataset_keys), not yet its absolute path.
std::size_t y_file_part(const config::Config& c, const std::string& y) {
  if (data_options(c).path.extension() == ".npz" || y == "y") return 0;
  const std::size_t npz = y.rfind(".npz:");
  return npz == std::string::npos ? y.size() : npz + 4;
}

// The npy source's keys: the arrays it reads, and how (NpyReadOptions).
struct NpySourceOptions {
  std::string x = "x";             // data.npy.x: the .npz's input array
  std::string y = "y";             // data.npy.y: the .npz's target array ("" none); beside a .npy, another file
  std::vector<std::string> extra;  // data.npy.extra: more .npz arrays, batch tensors under their own names
  NpyReadOptions read;             // data.npy.mmap
};

const config::Binding<NpyReadOptions>& npy_read_binding() {
  return config::bound<NpyReadOptions>("data.npy.", [](config::Binding<NpyReadOptions>& b) {
    b.key("mmap", &NpyReadOptions::mmap, "memory-map arrays instead of reading them");
  });
}

// The data.npy.* keys of NpySourceOptions, bound once (config/binding.h); x and y name arrays (arrays()).
const config::Binding<NpySourceOptions>& npy_binding() {
  using O = NpySourceOptions;
  return config::bound<O>("data.npy.", [](config::Binding<O>& b) {
    b.key("x", &O::x, ".npz: input array name");
    // With a .npy data.path, y names a file (relative to the config file, as every path), an array's name otherwise.
    b.key("y", &O::y, ".npz: target array name ('' for none); .npy: another file, or file.npz:array (relative to the config file)")
        .file_path(y_file_part);
    b.key("extra", &O::extra, ".npz: more arrays, batch tensors under their own names (a model's other inputs)");
    b.nest(&O::read, npy_read_binding());
  });
}

NpyReadOptions read_options(const SourceRequest& r) { return npy_binding().read(*r.config).read; }

std::string npz_member(const std::filesystem::path& path, const std::string& name) {
  return path.extension() == ".npz" ? fmt::format("{}:{}", path.string(), name) : name;
}

// "x" and "y" -> a .npy file or FILE.npz:ARRAY. A .npz names its arrays by data.npy.x/y; a single .npy file is
// x, and data.npy.y may name another file (its default "y", an array name, then means "none").
std::map<std::string, std::string> arrays(const SourceRequest& r) {
  const NpySourceOptions o = npy_binding().read(*r.config);
  const std::string &x = o.x, &y = o.y;
  std::map<std::string, std::string> out;
  if (r.path.extension() == ".npz") {
    BELLOWS_CHECK_CONFIG(!x.empty(), "data.npy.x is empty", "name the input array of the .npz file");
    out.emplace("x", npz_member(r.path, x));
    if (!y.empty()) out.emplace("y", npz_member(r.path, y));
    for (const std::string& name : o.extra) {
      BELLOWS_CHECK_CONFIG(name != "x" && name != "y" && out.count(name) == 0,
                           fmt::format("data.npy.extra names '{}', which is already a tensor of the batch", name),
                           "list the .npz's other arrays, each once (x and y come from data.npy.x and data.npy.y)");
      out.emplace(name, npz_member(r.path, name));
    }
  } else {
    BELLOWS_CHECK_CONFIG(o.extra.empty(),
                         fmt::format("data.npy.extra is set, but {} is a single .npy file", r.path.string()),
                         "put the arrays into one .npz file (np.savez), or leave data.npy.extra empty");
    out.emplace("x", r.path.string());
    if (!y.empty() && y != "y") {
      config::check_path_exists(*r.config, "data.npy.y", y.substr(0, y_file_part(*r.config, y)), ErrorKind::kData,
                                "give data.npy.y the targets' .npy file (or file.npz:array)");
      out.emplace("y", y);
    }
  }
  return out;
}

SourceEntry npy_source() {
  SourceEntry e;
  e.name = "npy";
  e.help = "NumPy .npy/.npz arrays, memory-mapped";
  e.add_keys = [](config::Schema& s) { npy_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> { return make_npy_dataset(arrays(r), read_options(r)); };
  e.read_series = [](const SourceRequest& r) {
    Series s;
    for (const auto& [name, array] : arrays(r)) {
      const auto colon = array.rfind(".npz:");
      at::Tensor t = colon == std::string::npos ? read_npy(array, read_options(r))
                                                : read_npz_array(array.substr(0, colon + 4), array.substr(colon + 5), read_options(r));
      if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat) t = t.to(at::kFloat);
      s.tensors.emplace(name, t);
    }
    s.name = fmt::format("npy {}", r.path.string());
    s.describe_row = [p = r.path.string()](std::int64_t row) { return fmt::format("{} row {}", p, row); };
    return s;
  };
  return e;
}

const SourceRegistrar kNpyRegistered(npy_source());

}  // namespace

std::vector<std::string> npy_extra_arrays(const config::Config& c) { return npy_binding().read(c).extra; }

}  // namespace bellows::data
