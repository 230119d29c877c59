# The PyPI torch wheel's libtorch_cuda.so carries no RUNPATH: Python preloads the CUDA libraries of the
# nvidia-* wheels beside it. A C++ program must find them itself, and must not pick up the CUDA toolkit's
# own (older) libnccl.so.2 or libcudart instead. This file defines bellows::torch_runtime, an interface
# target that adds those wheel directories to the link search (-rpath-link) and to the run-time search path
# (as DT_RPATH, which unlike DT_RUNPATH also applies to libtorch_cuda's own dependencies).
# Used by bellows' own build and by its installed package config.
if(TARGET bellows::torch_runtime)
  return()
endif()
get_filename_component(_bellows_torch_root "${Torch_DIR}/../../.." ABSOLUTE)
set(BELLOWS_TORCH_LIB_DIR "${_bellows_torch_root}/lib")
file(GLOB BELLOWS_TORCH_RUNTIME_DIRS LIST_DIRECTORIES true "${_bellows_torch_root}/../nvidia/*/lib")
list(PREPEND BELLOWS_TORCH_RUNTIME_DIRS "${BELLOWS_TORCH_LIB_DIR}")

add_library(bellows::torch_runtime INTERFACE IMPORTED)
set(_bellows_link_options "LINKER:--disable-new-dtags")
foreach(_dir IN LISTS BELLOWS_TORCH_RUNTIME_DIRS)
  list(APPEND _bellows_link_options "LINKER:-rpath-link,${_dir}" "LINKER:-rpath,${_dir}")
endforeach()
set_target_properties(bellows::torch_runtime PROPERTIES INTERFACE_LINK_OPTIONS "${_bellows_link_options}")

# The CUDA runtime API for bellows' CUDA probe: the toolkit's headers and import library. At run time the
# DT_RPATH above puts the wheel's libcudart.so.13 first, so the process holds the one LibTorch uses.
# CMake 3.25.1's FindCUDAToolkit (Debian 12's as of 2026) marks CUDA::nvToolsExt deprecated without checking that
# it exists, and CUDA 13 has none: the configure stopped ("set_property could not find TARGET CUDA::nvToolsExt") in
# a Debian 12 chroot with only the build tools (docs/gpu.md). It does so only where CMAKE_MINIMUM_REQUIRED_VERSION
# reads 3.25 or more, so the module runs in a function that reads 3.24 there; the targets it makes are the
# directory's, its variables are not needed here.
function(_bellows_find_cuda_toolkit)
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit QUIET)
endfunction()
if(TARGET torch_cuda)
  _bellows_find_cuda_toolkit()
  if(TARGET CUDA::cudart)
    add_library(bellows::cudart INTERFACE IMPORTED)
    set_target_properties(bellows::cudart PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cudart)
  endif()
endif()
