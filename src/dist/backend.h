// The c10d process group of a backend name (private to dist/): Gloo for CPU tensors, NCCL for CUDA tensors.
// Gloo's headers come from Debian's libgloo-dev (the wheel ships c10d's headers but not Gloo's; Gloo itself is
// linked into libtorch_cpu). NCCL is built only with CUDA (src/dist/cuda/nccl_backend.cpp).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <exception>
#include <string>

namespace bellows::dist {

c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& name, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                               int world_size, std::chrono::milliseconds timeout);

// The first line of a c10d/Gloo/NCCL error: enough to name the failure without its C++ stack.
std::string first_line(const std::exception& e);

// Defined in cuda/nccl_backend.cpp, or nccl_backend_none.cpp (a clear error) in a build without CUDA.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                                    std::chrono::milliseconds timeout);

}  // namespace bellows::dist
