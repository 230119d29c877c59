// make_cuda_step_graph in a build without CUDA (train/step_graph.h).
#include "bellows/train/step_graph.h"
#include "bellows/util/check.h"

namespace bellows::train {

std::unique_ptr<StepGraph> make_cuda_step_graph(c10::Device device) {
  BELLOWS_FAIL(ErrorKind::kResource, fmt::format("compile: cuda_graph on {}: bellows was built without its CUDA paths", device.str()),
               "build bellows against a CUDA LibTorch with the CUDA toolkit (docs/gpu.md), or set compile: off");
}

}  // namespace bellows::train
