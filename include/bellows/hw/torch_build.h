// How the LibTorch in use was built and how it is set to run: version, ABI, CUDA/cuDNN it was built with,
// BLAS/oneDNN/OpenMP, the CPU capability ATen dispatches to, and the thread pools.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bellows::hw {

struct TorchBuildInfo {
  std::string version;           // TORCH_VERSION of the headers we compiled against
  bool cxx11_abi = false;        // _GLIBCXX_USE_CXX11_ABI
  bool cuda_compiled = false;    // USE_CUDA
  std::string cuda_version;      // CUDA it was built with
  std::string cudnn_version;     // cuDNN it was built with
  bool nccl = false;             // USE_NCCL
  bool gloo = false;             // USE_GLOO
  std::vector<std::string> cuda_arch_list;  // compiled architectures, "8.0", "9.0", ...
  std::string compiler;
  std::string blas;              // BLAS_INFO
  std::string lapack;            // LAPACK_INFO
  std::string mkl;               // MKL version line, when built with MKL
  std::string onednn;            // oneDNN (MKL-DNN) version line
  std::string openmp;            // OpenMP version line
  std::string parallel_backend;  // "OpenMP", "native thread pool", ...
  std::string cpu_capability_build;    // "CPU capability usage" in the build configuration
  std::string cpu_capability_runtime;  // what ATen dispatches to on this CPU now
  int intra_op_threads = 0;
  int inter_op_threads = 0;
};

// Parses the text of at::show_config() into the build fields (pure; tested on recorded text).
TorchBuildInfo parse_torch_config(std::string_view show_config);

// The running LibTorch: parse_torch_config(at::show_config()) plus runtime state.
TorchBuildInfo probe_torch_build();

}  // namespace bellows::hw
