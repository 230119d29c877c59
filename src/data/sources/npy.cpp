// data.source: npy -- NumPy .npy/.npz arrays (memory-mapped), as rows or as a series for sliding windows.
#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/data/npy.h"
#include "bellows/data/npy_dataset.h"
#include "bellows/data/source_registry.h"
#include "bellows/util/check.h"

namespace bellows::data {
namespace {

// The data.npy.* key of NpyReadOptions, bound once (config/binding.h); data.npy.x and y name arrays (arrays()).
const config::Binding<NpyReadOptions>& npy_binding() {
  return config::bound<NpyReadOptions>("data.npy.", [](config::Binding<NpyReadOptions>& b) {
    b.key("mmap", &NpyReadOptions::mmap, "memory-map arrays instead of reading them");
  });
}

NpyReadOptions read_options(const SourceRequest& r) { return npy_binding().read(*r.config); }

// The part of data.npy.y that names a file (config::PathPart): none beside an .npz data.path (y is an array there) or
// for the default "y"; the file of file.npz:array; else all of it.
std::size_t y_file_part(const config::Config& c, const std::string& y) {
  const std::string data = c.has("data.path") ? c.node("data.path").Scalar() : "";
  if (std::filesystem::path(data).extension() == ".npz" || y == "y") return 0;
  const std::size_t npz = y.rfind(".npz:");
  return npz == std::string::npos ? y.size() : npz + 4;
}

std::string npz_member(const std::filesystem::path& path, const std::string& name) {
  return path.extension() == ".npz" ? fmt::format("{}:{}", path.string(), name) : name;
}

// "x" and "y" -> a .npy file or FILE.npz:ARRAY. A .npz names its arrays by data.npy.x/y; a single .npy file is
// x, and data.npy.y may name another file (its default "y", an array name, then means "none").
std::map<std::string, std::string> arrays(const SourceRequest& r) {
  const std::string x = config::get_string(*r.config, "data.npy.x"), y = config::get_string(*r.config, "data.npy.y");
  std::map<std::string, std::string> out;
  if (r.path.extension() == ".npz") {
    BELLOWS_CHECK_CONFIG(!x.empty(), "data.npy.x is empty", "name the input array of the .npz file");
    out.emplace("x", npz_member(r.path, x));
    if (!y.empty()) out.emplace("y", npz_member(r.path, y));
    for (const std::string& name : config::get_string_list(*r.config, "data.npy.extra")) {
      BELLOWS_CHECK_CONFIG(name != "x" && name != "y" && out.count(name) == 0,
                           fmt::format("data.npy.extra names '{}', which is already a tensor of the batch", name),
                           "list the .npz's other arrays, each once (x and y come from data.npy.x and data.npy.y)");
      out.emplace(name, npz_member(r.path, name));
    }
  } else {
    BELLOWS_CHECK_CONFIG(config::get_string_list(*r.config, "data.npy.extra").empty(),
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
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    s.add("data.npy.x", Type::kString, ".npz: input array name").default_value(node("x"));
    // With a .npy data.path, y names a file (relative to the config file, as every path), an array's name otherwise.
    s.add("data.npy.y", Type::kString,
          ".npz: target array name ('' for none); .npy: another file, or file.npz:array (relative to the config file)")
        .default_value(node("y"))
        .file_path(y_file_part);
    s.add("data.npy.extra", Type::kStringList, ".npz: more arrays, batch tensors under their own names (a model's other inputs)")
        .default_value(YAML::Load("[]"));
    npy_binding().declare(s);
  };
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
}  // namespace bellows::data
