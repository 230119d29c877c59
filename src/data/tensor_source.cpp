// In-memory batch source; see tensor_source.h.
#include "bellows/data/tensor_source.h"

#include "bellows/data/tensor_dataset.h"

namespace bellows::data {

TensorSource::TensorSource(std::map<std::string, at::Tensor> tensors, TensorSourceOptions options) {
  TensorDatasetOptions named;
  named.name = "in-memory tensors";
  auto dataset = std::make_shared<TensorDataset>(std::move(tensors), named);
  SamplerOptions sampler;
  sampler.kind = options.shuffle ? "shuffle" : "sequential";
  sampler.seed = options.seed;
  LoaderOptions loader;
  loader.batch_size = options.batch_size;
  loader.drop_last = options.drop_last;
  loader.workers = 0;  // a gather from memory gains nothing from threads
  loader_ = std::make_unique<Loader>(dataset, Sampler(dataset->size(), sampler), loader);
}

}  // namespace bellows::data
