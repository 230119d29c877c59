# Finds bellows' dependencies. LibTorch comes from the PyPI wheel (scripts/setup.sh puts its
# share/cmake on CMAKE_PREFIX_PATH); everything else from Debian's -dev packages.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
# LibTorch's Caffe2 config looks up the CUDA toolkit; without a GPU it cannot detect an architecture.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
find_package(Torch REQUIRED)
# The LibTorch versions bellows builds against: 2.11 to 2.13 (the code guards their differences with
# TORCH_VERSION_MINOR and says where). Any LibTorch: scripts/setup.sh's BELLOWS_TORCH or Torch_DIR (docs/gpu.md).
if(Torch_VERSION VERSION_LESS 2.11 OR Torch_VERSION VERSION_GREATER_EQUAL 2.14)
  message(FATAL_ERROR "LibTorch ${Torch_VERSION} (${Torch_DIR}): bellows builds against torch 2.11 to 2.13")
endif()
# The C++11 ABI: bellows passes std::string and std::vector across LibTorch's interface. A LibTorch built with the
# old ABI exports no "cxx11" names from libc10.
find_library(BELLOWS_C10_LIBRARY c10 PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
if(BELLOWS_C10_LIBRARY)
  file(STRINGS "${BELLOWS_C10_LIBRARY}" _bellows_cxx11_names REGEX "B5cxx11" LIMIT_COUNT 1)
  if(NOT _bellows_cxx11_names)
    message(FATAL_ERROR "LibTorch in ${TORCH_INSTALL_PREFIX} was built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0): "
      "bellows needs the C++11 ABI (every PyPI torch wheel since 2.7; libtorch's 'cxx11-abi' downloads)")
  endif()
endif()
# A CUDA LibTorch and the toolkit it compiles against must share the CUDA major version: the wheel says which it
# was built with in torch/version.py, a libtorch download in build-version ("2.11.0+cu130").
if(BELLOWS_WITH_CUDA AND TARGET torch_cuda)
  set(_bellows_torch_cuda "")
  if(EXISTS "${TORCH_INSTALL_PREFIX}/version.py")
    file(STRINGS "${TORCH_INSTALL_PREFIX}/version.py" _line REGEX "^cuda")
    string(REGEX MATCH "'([0-9]+)\\.[0-9]+'" _m "${_line}")
    set(_bellows_torch_cuda "${CMAKE_MATCH_1}")
  elseif(EXISTS "${TORCH_INSTALL_PREFIX}/build-version")
    file(READ "${TORCH_INSTALL_PREFIX}/build-version" _line)
    string(REGEX MATCH "\\+cu([0-9]+)[0-9]" _m "${_line}")
    set(_bellows_torch_cuda "${CMAKE_MATCH_1}")
  endif()
  if(_bellows_torch_cuda AND CUDAToolkit_VERSION_MAJOR AND NOT _bellows_torch_cuda STREQUAL CUDAToolkit_VERSION_MAJOR)
    message(FATAL_ERROR "LibTorch in ${TORCH_INSTALL_PREFIX} was built with CUDA ${_bellows_torch_cuda}, the toolkit in "
      "${CUDAToolkit_ROOT} is CUDA ${CUDAToolkit_VERSION}: set CUDAToolkit_ROOT to a CUDA ${_bellows_torch_cuda}.x toolkit, or "
      "-DBELLOWS_WITH_CUDA=OFF for a CPU-only bellows")
  endif()
endif()
include(BellowsTorchRuntime)  # defines: bellows::torch_runtime, bellows::cudart
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)
# Data formats (data/): netCDF-C, libpng, libjpeg(-turbo) and zlib (NPZ deflate), all from Debian.
find_package(netCDF REQUIRED)
find_package(PNG REQUIRED)
find_package(JPEG REQUIRED)
find_package(ZLIB REQUIRED)
# Data parallel (dist/): c10d's Gloo process group is in libtorch_cpu, but the wheel ships no Gloo headers;
# Debian's libgloo-dev provides them (c10d's header only holds Gloo's types by pointer).
find_path(BELLOWS_GLOO_INCLUDE_DIR gloo/context.h)
if(NOT BELLOWS_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "Gloo's headers (gloo/context.h) were not found: install Debian's libgloo-dev (scripts/setup.sh does)")
endif()
# Checkpoint checksums (ckpt/): SHA-256 from OpenSSL's libcrypto.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# Subword tokenization of text data (data/tokenizer): Debian's libsentencepiece (and its trainer), private to bellows.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
# Charts of `bellows bench --matrix` (obs/bar_chart): cairo draws one picture onto an SVG and a PNG surface.
pkg_check_modules(CAIRO REQUIRED IMPORTED_TARGET cairo)

# LibTorch ships its own {fmt} (12.x), and its public c10 headers include <fmt/...>, so that copy wins the
# include search over Debian's. We use it header-only rather than mixing two fmt versions in one program.
set(BELLOWS_FMT_DEFINITIONS FMT_HEADER_ONLY=1)

set(BELLOWS_HAVE_CUDA OFF)
if(BELLOWS_WITH_CUDA)
  if(TARGET torch_cuda AND TARGET bellows::cudart)
    set(BELLOWS_HAVE_CUDA ON)
  else()
    message(WARNING "BELLOWS_WITH_CUDA is ON but LibTorch has no CUDA (torch_cuda) or the toolkit is missing; building CPU-only")
  endif()
endif()
message(STATUS "bellows: LibTorch ${Torch_VERSION}, CUDA paths ${BELLOWS_HAVE_CUDA}")

# NCCL's header must be the one of the library LibTorch loads: c10d's ProcessGroupNCCL::Options holds an
# ncclConfig_t whose size changes between NCCL releases, so a header from the CUDA toolkit (2.28 beside a wheel's
# 2.29) lays the struct out differently than libtorch_cuda does. The wheel's nvidia-nccl package has both; its
# include directory goes first (a plain -I, searched before the toolkit's -isystem). A mismatch between the header
# found and the library's package version stops the configure.
set(BELLOWS_NCCL_INCLUDE_DIR "")
if(BELLOWS_HAVE_CUDA)
  get_filename_component(_bellows_site "${Torch_DIR}/../../../.." ABSOLUTE)
  if(EXISTS "${_bellows_site}/nvidia/nccl/include/nccl.h")
    set(BELLOWS_NCCL_INCLUDE_DIR "${_bellows_site}/nvidia/nccl/include")
    file(STRINGS "${BELLOWS_NCCL_INCLUDE_DIR}/nccl.h" _bellows_nccl_code REGEX "^#define NCCL_VERSION_CODE [0-9]+")
    string(REGEX MATCH "[0-9]+$" _bellows_nccl_code "${_bellows_nccl_code}")
    file(GLOB _bellows_nccl_dist LIST_DIRECTORIES true "${_bellows_site}/nvidia_nccl_cu*-*.dist-info")
    if(_bellows_nccl_dist)
      list(GET _bellows_nccl_dist 0 _bellows_nccl_dist)
      get_filename_component(_bellows_nccl_name "${_bellows_nccl_dist}" NAME)
      string(REGEX MATCH "-([0-9]+)\\.([0-9]+)\\.([0-9]+)\\.dist-info$" _bellows_nccl_lib "${_bellows_nccl_name}")
      math(EXPR _bellows_nccl_lib_code "${CMAKE_MATCH_1} * 10000 + ${CMAKE_MATCH_2} * 100 + ${CMAKE_MATCH_3}")
      if(NOT _bellows_nccl_code STREQUAL _bellows_nccl_lib_code)
        message(FATAL_ERROR "NCCL header ${BELLOWS_NCCL_INCLUDE_DIR}/nccl.h has NCCL_VERSION_CODE ${_bellows_nccl_code}, "
                            "but LibTorch loads NCCL ${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3} (${_bellows_nccl_dist}): "
                            "reinstall the torch wheel's nvidia-nccl package so that header and library match")
      endif()
    endif()
    message(STATUS "bellows: NCCL header of the wheel's library, NCCL_VERSION_CODE ${_bellows_nccl_code}")
  else()
    message(STATUS "bellows: no NCCL package beside LibTorch (${_bellows_site}/nvidia/nccl); NCCL's header comes from "
                   "the CUDA toolkit, checked against the loaded library when a process group starts")
  endif()
endif()
