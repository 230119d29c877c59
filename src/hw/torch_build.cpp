// Reads how the running LibTorch was built (at::show_config) and how its thread pools are set now.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>

#include <regex>

#include "bellows/hw/torch_build.h"
#include "hw/sysfs.h"

namespace bellows::hw {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

bool truthy(const std::string& value) { return value == "ON" || value == "1" || value == "TRUE"; }

// "75" -> "7.5", "100" -> "10.0", "90a" -> "9.0a".
std::string arch_from_sm(const std::string& sm) {
  std::string digits = sm, suffix;
  while (!digits.empty() && !std::isdigit(static_cast<unsigned char>(digits.back()))) {
    suffix.insert(suffix.begin(), digits.back());
    digits.pop_back();
  }
  if (digits.size() < 2) return sm;
  return digits.substr(0, digits.size() - 1) + "." + digits.back() + suffix;
}

void parse_build_settings(std::string_view settings, TorchBuildInfo& info) {
  std::map<std::string, std::string> kv;
  std::size_t pos = 0;
  while (pos < settings.size()) {
    std::size_t end = settings.find(", ", pos);  // values contain bare commas (CUDA_FLAGS), never ", "
    if (end == std::string_view::npos) end = settings.size();
    const std::string_view item = settings.substr(pos, end - pos);
    const auto eq = item.find('=');
    if (eq != std::string_view::npos) kv[sysfs::trim(item.substr(0, eq))] = sysfs::trim(item.substr(eq + 1));
    pos = end + 2;
  }
  auto get = [&](const char* key) {
    auto it = kv.find(key);
    return it == kv.end() ? std::string() : it->second;
  };
  info.cuda_compiled = truthy(get("USE_CUDA"));
  info.cuda_version = get("CUDA_VERSION");
  info.cudnn_version = get("CUDNN_VERSION");
  info.nccl = truthy(get("USE_NCCL"));
  info.gloo = truthy(get("USE_GLOO"));
  info.blas = get("BLAS_INFO");
  info.lapack = get("LAPACK_INFO");
  if (info.version.empty()) info.version = get("TORCH_VERSION");
  static const std::regex gencode(R"(code=sm_([0-9]+[a-z]?))");
  const std::string flags = get("CUDA_FLAGS");
  for (auto it = std::sregex_iterator(flags.begin(), flags.end(), gencode); it != std::sregex_iterator(); ++it) {
    const std::string arch = arch_from_sm((*it)[1].str());
    if (std::find(info.cuda_arch_list.begin(), info.cuda_arch_list.end(), arch) == info.cuda_arch_list.end()) {
      info.cuda_arch_list.push_back(arch);
    }
  }
}

}  // namespace

TorchBuildInfo parse_torch_config(std::string_view show_config) {
  TorchBuildInfo info;
  bool first_item = true;
  std::size_t pos = 0;
  while (pos < show_config.size()) {
    std::size_t eol = show_config.find('\n', pos);
    if (eol == std::string_view::npos) eol = show_config.size();
    std::string line = sysfs::trim(show_config.substr(pos, eol - pos));
    pos = eol + 1;
    if (!starts_with(line, "- ")) continue;
    line.erase(0, 2);
    if (first_item) {  // the first item names the compiler
      info.compiler = line;
      first_item = false;
    } else if (starts_with(line, "Intel(R) oneAPI Math Kernel Library") || starts_with(line, "Intel(R) Math Kernel")) {
      info.mkl = line;
    } else if (line.find("MKL-DNN") != std::string::npos || line.find("oneDNN") != std::string::npos) {
      info.onednn = line.substr(0, line.find(" (Git Hash"));
    } else if (starts_with(line, "OpenMP")) {
      info.openmp = line;
    } else if (starts_with(line, "CPU capability usage:")) {
      info.cpu_capability_build = sysfs::trim(line.substr(line.find(':') + 1));
    } else if (starts_with(line, "Build settings:")) {
      parse_build_settings(std::string_view(line).substr(line.find(':') + 1), info);
    }
  }
  return info;
}

TorchBuildInfo probe_torch_build() {
  TorchBuildInfo info = parse_torch_config(at::show_config());
  info.version = TORCH_VERSION;
  info.cxx11_abi = _GLIBCXX_USE_CXX11_ABI == 1;
  info.cpu_capability_runtime = at::get_cpu_capability();
  info.intra_op_threads = at::get_num_threads();
  info.inter_op_threads = static_cast<int>(at::get_num_interop_threads());
  const std::string parallel = at::get_parallel_info();
  const auto backend = parallel.find("ATen parallel backend:");
  if (backend != std::string::npos) {
    const auto eol = parallel.find('\n', backend);
    info.parallel_backend = sysfs::trim(parallel.substr(backend + 22, eol == std::string::npos ? std::string::npos : eol - backend - 22));
  }
  return info;
}

}  // namespace bellows::hw
