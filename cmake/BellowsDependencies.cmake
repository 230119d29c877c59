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
