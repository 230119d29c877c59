// The names registered by the CUDA-only source files (util/cuda_units.h).
#include "bellows/util/cuda_units.h"

#include <algorithm>
#include <mutex>

namespace bellows::util {
namespace {

struct CudaUnits {
  std::mutex mutex;
  std::vector<std::string> names;
};

CudaUnits& units() {
  static CudaUnits u;  // made on first use: registrations run in other files' static initialisers
  return u;
}

}  // namespace

bool register_cuda_unit(const char* name) {
  auto& u = units();
  std::lock_guard<std::mutex> lock(u.mutex);
  u.names.emplace_back(name);
  return true;
}

std::vector<std::string> cuda_units() {
  auto& u = units();
  std::lock_guard<std::mutex> lock(u.mutex);
  std::vector<std::string> names = u.names;
  std::sort(names.begin(), names.end());
  return names;
}

const std::vector<std::string>& cuda_build_units() {
  static const std::vector<std::string> units = {"data/cuda_stager", "dist/nccl_backend", "hw/gpu_probe_cuda", "lab/selftest_cuda",
                                                 "obs/cuda_memory", "train/cuda_step_graph"};
  return units;
}

}  // namespace bellows::util
