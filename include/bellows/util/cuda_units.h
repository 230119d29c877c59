// The CUDA-only source files compiled into this library. Each file that is built only with CUDA (src/*/cuda/)
// registers its name when the library loads, so a test and `bellows selftest` can tell that the CUDA code is in
// the binary, not preprocessed away (a build that should have CUDA paths and lists none is misconfigured).
//   namespace { const bool registered = bellows::util::register_cuda_unit("obs/cuda_memory"); }
#pragma once

#include <string>
#include <vector>

namespace bellows::util {

bool register_cuda_unit(const char* name);  // returns true (for a static initialiser)
std::vector<std::string> cuda_units();      // sorted; empty in a build without CUDA
// What cuda_units() lists in a build with CUDA, sorted: a new CUDA-only source file is added here too.
const std::vector<std::string>& cuda_build_units();

}  // namespace bellows::util
