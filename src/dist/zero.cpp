// Data parallel with sharded optimizer state; see zero.h.
#include "bellows/dist/zero.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "bellows/util/check.h"

namespace bellows::dist {

std::vector<int> assign_owners(const std::vector<std::int64_t>& numels, const std::vector<int>& same_as, int world_size) {
  BELLOWS_CHECK(world_size >= 1 && same_as.size() == numels.size(), "assign_owners: bad arguments", "");
  std::vector<std::int64_t> load(static_cast<std::size_t>(world_size), 0);
  std::vector<int> owners(numels.size(), 0);
  for (std::size_t i = 0; i < numels.size(); ++i) {
    if (same_as[i] >= 0) {
      owners[i] = owners[static_cast<std::size_t>(same_as[i])];
      continue;
    }
    std::size_t best = 0;
    for (std::size_t r = 1; r < load.size(); ++r) {
      if (load[r] < load[best]) best = r;
    }
    owners[i] = static_cast<int>(best);
    load[best] += numels[i];
  }
  return owners;
}

namespace {

// Per tensor: its elements, and the first index of the same tensor (a tied weight listed twice), or -1.
std::pair<std::vector<std::int64_t>, std::vector<int>> numels_and_ties(const std::vector<at::Tensor>& params) {
  std::vector<std::int64_t> numels;
  std::vector<int> same_as;
  std::unordered_map<const c10::TensorImpl*, int> first;
  for (std::size_t i = 0; i < params.size(); ++i) {
    numels.push_back(params[i].numel());
    const auto [it, inserted] = first.emplace(params[i].unsafeGetTensorImpl(), static_cast<int>(i));
    same_as.push_back(inserted ? -1 : it->second);
  }
  return {numels, same_as};
}

}  // namespace

std::vector<int> spread_owners(const std::vector<at::Tensor>& params, int world_size) {
  const auto [numels, same_as] = numels_and_ties(params);
  return assign_owners(numels, same_as, world_size);
}

std::vector<int> Strategy::owners(const std::vector<at::Tensor>& params) const { return spread_owners(params, world_size()); }

Zero::Zero(const ProcessInfo& info, DdpOptions options, int stage) : Zero(std::make_shared<Ddp>(info, std::move(options)), stage) {}
Zero::Zero(std::shared_ptr<Ddp> joined, int stage) : stage_(stage), ddp_(std::move(joined)) {
  BELLOWS_CHECK(stage >= 1 && stage <= 3, fmt::format("ZeRO stage {}", stage), "stages 1 and 2, and 3 as fsdp's base");
  BELLOWS_CHECK(ddp_ != nullptr, "Zero without a process group", "report this bug");
}
Zero::~Zero() = default;

std::string Zero::describe() const {
  std::string text = ddp_->describe() + (stage_ == 1   ? "; optimizer state sharded (zero1)"
                                         : stage_ == 2 ? "; optimizer state and gradients sharded (zero2)"
                                                       : "; parameters, gradients and optimizer state sharded (fsdp)");
  if (!owners_.empty()) {
    const std::vector<std::int64_t> elements = shard_elements();
    std::int64_t total = 0;
    for (auto e : elements) total += e;
    text += fmt::format(": the ranks update {} of {} parameter elements", fmt::join(elements, " / "), total);
  }
  return text;
}

void Zero::backward(const at::Tensor& loss) {
  // Accumulation micro-steps: this strategy's no_sync() reaches the Ddp whose hooks communicate.
  std::optional<Strategy::NoSync> local;
  if (!syncing()) local.emplace(ddp_->no_sync());
  ddp_->backward(loss);
}

std::vector<bool> Zero::shard(const std::vector<at::Tensor>& params) {
  const int world = world_size();
  const auto [numels, same_as] = numels_and_ties(params);
  const auto distinct = std::count(same_as.begin(), same_as.end(), -1);
  BELLOWS_CHECK_CONFIG(distinct >= world,
                       fmt::format("dist.strategy is {} on {} ranks, but the model has {} trainable tensor(s): ZeRO gives each "
                                   "tensor one owner rank, and a rank with none has no optimizer to run",
                                   name(), world, distinct),
                       "use dist.strategy: ddp for so small a model, or fewer ranks");
  owners_ = assign_owners(numels, same_as, world);
  same_as_ = same_as;
  numels_ = numels;
  // What finish_update() broadcasts: every parameter but those gathered when used (fsdp).
  std::vector<std::size_t> broadcast;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (on_demand_.empty() || !on_demand_[i]) broadcast.push_back(i);
  }
  flats_ = flats_of(params, broadcast);
  std::vector<bool> mine(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) mine[i] = owners_[i] == rank();
  return mine;
}

std::vector<int> Zero::owners(const std::vector<at::Tensor>& params) const {
  BELLOWS_CHECK(owners_.size() == params.size(), "Zero::owners() before shard() or with other parameters", "call shard() first");
  return owners_;
}

at::Tensor Zero::combine_gradient_norms(const at::Tensor& norms, std::vector<std::int64_t>& held, std::int64_t count) {
  if (stage_ < 2) return norms;  // zero1: every rank holds every averaged gradient
  // Every parameter's norm on every rank: each rank its own parameters' at their places, zeros elsewhere, summed over
  // the ranks (x + 0 is x exactly), so every rank has ddp's list and computes ddp's total from it.
  at::Tensor all = at::zeros({count}, norms.options());
  if (!held.empty()) all.index_copy_(0, at::tensor(held, at::kLong).to(all.device()), norms);
  std::vector<at::Tensor> one{all};
  ddp_->all_reduce_sum(one, "gradient norms");
  held.resize(static_cast<std::size_t>(count));
  std::iota(held.begin(), held.end(), std::int64_t{0});
  return one.front();
}

std::vector<Zero::Flat> Zero::flats_of(const std::vector<at::Tensor>& params, const std::vector<std::size_t>& indices) const {
  // One flat buffer per (owner, dtype, device), in the parameters' order: every rank builds the same list.
  std::vector<Flat> flats;
  std::map<std::tuple<int, int, std::string>, std::size_t> index;
  for (const std::size_t i : indices) {
    if (same_as_[i] >= 0) continue;
    const auto key = std::make_tuple(owners_[i], static_cast<int>(params[i].scalar_type()), params[i].device().str());
    auto [it, inserted] = index.emplace(key, flats.size());
    if (inserted) flats.push_back(Flat{owners_[i], {}, 0});
    Flat& f = flats[it->second];
    f.params.push_back(params[i]);
    f.numel += params[i].numel();
  }
  return flats;
}

std::vector<std::int64_t> Zero::shard_elements() const {
  std::vector<std::int64_t> elements(static_cast<std::size_t>(world_size()), 0);
  for (std::size_t i = 0; i < owners_.size(); ++i) {
    if (same_as_[i] < 0) elements[static_cast<std::size_t>(owners_[i])] += numels_[i];
  }
  return elements;
}

void Zero::setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) {
  if (stage_ >= 2) {
    BELLOWS_CHECK(owners_.size() == params.size(), "Zero::setup() before shard() or with other parameters",
                  "call shard() with the trainable parameters first");
    ddp_->reduce_to_owners(owners_);
  }
  ddp_->setup(model, params);
}

void Zero::finish_update() {
  BELLOWS_CHECK(!owners_.empty(), "Zero::finish_update() before shard()", "call shard() with the trainable parameters first");
  at::NoGradGuard no_grad;
  for (const Flat& f : flats_) {
    const bool mine = f.owner == rank();
    at::Tensor flat;
    if (mine) {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& p : f.params) pieces.push_back(p.detach().reshape({-1}));
      flat = at::cat(pieces);
    } else {
      flat = at::empty({f.numel}, f.params.front().options().requires_grad(false));
    }
    std::vector<at::Tensor> one{flat};
    ddp_->broadcast(one, f.owner);
    if (mine) continue;
    std::int64_t offset = 0;
    for (const at::Tensor& p : f.params) {
      p.detach().copy_(one.front().narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

StateDict Zero::gather_state(const StateDict& local) {
  // Each rank's entries, pickled (torch::pickle_save: tensors and their names, as torch.save writes them), are
  // broadcast from that rank in turn: a size, then the bytes. Rank 0 merges them; the scalars every rank has
  // ("lr", "steps") are rank 0's, which needs nothing sent. Written here because c10d's C++ API has no object
  // collectives.
  StateDict merged;
  const bool main = rank() == 0;
  if (main) merged = local;
  for (int r = 1; r < world_size(); ++r) {
    std::vector<char> bytes;
    if (r == rank()) {
      c10::Dict<std::string, at::Tensor> dict;
      for (const auto& [key, t] : local) dict.insert(key, t.detach().to(at::kCPU).contiguous());
      bytes = torch::jit::pickle_save(c10::IValue(dict));
    }
    std::vector<at::Tensor> size{at::full({1}, static_cast<std::int64_t>(bytes.size()), at::kLong)};
    ddp_->broadcast(size, r);
    const std::int64_t n = size.front().item<std::int64_t>();
    std::vector<at::Tensor> payload{r == rank() ? at::from_blob(bytes.data(), {n}, at::kByte).clone() : at::empty({n}, at::kByte)};
    ddp_->broadcast(payload, r);
    if (!main) continue;
    const at::Tensor received = payload.front().to(at::kCPU).contiguous();
    const auto* data = static_cast<const char*>(received.data_ptr());
    const c10::IValue value = torch::jit::pickle_load(std::vector<char>(data, data + n));
    for (const auto& entry : value.toGenericDict()) {
      merged.emplace(entry.key().toStringRef(), entry.value().toTensor());  // emplace: rank 0's lr and steps stay
    }
  }
  return main ? merged : StateDict{};
}

}  // namespace bellows::dist
