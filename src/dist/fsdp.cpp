// Sharded parameters; see fsdp.h.
#include "bellows/dist/fsdp.h"

#include <chrono>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/util/check.h"
#include "bellows/util/name_patterns.h"  // defines: select_names
#include "dist/gradient_hooks.h"

namespace bellows::dist {
namespace {

constexpr std::size_t kNoUnit = static_cast<std::size_t>(-1);

// A tensor's elements in memory order (channels_last weights too): what an owner sends and a receiver writes back.
at::Tensor memory_order(const at::Tensor& t) { return t.detach().as_strided({t.numel()}, {1}); }

// Frees a parameter's storage in place: the tensor keeps its shape, and every view of it (those autograd saved for
// backward) shares the storage, so they all see the weights again once the storage is filled. Written here: LibTorch
// has no public call for it (Python FSDP resizes the untyped storage to 0 bytes, the same thing).
void free_storage(const at::Tensor& p) {
  c10::StorageImpl* s = p.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

// Gives a released parameter's storage its bytes back (from the allocator it was made with) and fills it from `flat`.
void fill_storage(const at::Tensor& p, const at::Tensor& flat) {
  const std::size_t nbytes = static_cast<std::size_t>(p.numel()) * p.element_size();
  c10::StorageImpl* s = p.storage().unsafeGetStorageImpl();
  if (s->nbytes() != nbytes) {
    s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
    s->set_nbytes(nbytes);
  }
  // A fresh tensor on the storage: copy_ bumps its version counter, not the parameter's (autograd's saved tensors of
  // the parameter stay valid).
  at::Tensor dst = at::empty({0}, p.options());
  dst.set_(p.storage(), 0, {p.numel()}, {1});
  dst.copy_(flat);
}

}  // namespace

// What the model calls (util/block_hooks.h); outlives the strategy if the model does, then does nothing.
class Fsdp::Hooks final : public BlockHooks {
 public:
  explicit Hooks(Fsdp* owner) : owner_(owner) {}
  void detach() { owner_ = nullptr; }
  void before_forward(const std::string& block) override {
    if (owner_) owner_->before_forward(block);
  }
  void after_forward(const std::string& block, bool) override {
    if (owner_) owner_->after_forward(block);
  }
  void before_backward(const std::string& block) override {
    if (owner_) owner_->before_backward(block);
  }

 private:
  Fsdp* owner_;
};

Fsdp::Fsdp(const ProcessInfo& info, DdpOptions options, std::vector<std::string> units)
    : Fsdp(std::make_shared<Ddp>(info, [&] {
             options.parameter_group = true;
             return std::move(options);
           }()),
           std::move(units)) {}

Fsdp::Fsdp(std::shared_ptr<Ddp> joined, std::vector<std::string> units)
    : Zero(std::move(joined), 3),
      patterns_(std::move(units)),
      grad_hooks_(std::make_unique<GradientHooks>()) {
  ddp_->open_parameter_group();
  hooks_ = std::make_shared<Hooks>(this);
}

Fsdp::~Fsdp() { hooks_->detach(); }

std::shared_ptr<BlockHooks> Fsdp::block_hooks() { return hooks_; }

void Fsdp::attach(const ModelBlocks& model, const std::vector<at::Tensor>& params) {
  BELLOWS_CHECK_CONFIG(!model.names.empty(),
                       fmt::format("dist.strategy fsdp gathers a model's parameters block by block, and this model ({}) has no named "
                                   "blocks",
                                   model.model_name),
                       "use dist.strategy: zero2 (optimizer state and gradients sharded, weights on every rank) for this model");
  const std::vector<std::string> names = patterns_.empty() ? model.names : select_names(patterns_, model.names, "dist.fsdp_units");
  std::unordered_map<const c10::TensorImpl*, std::size_t> index;
  for (std::size_t i = 0; i < params.size(); ++i) index.emplace(params[i].unsafeGetTensorImpl(), i);
  std::vector<std::vector<std::size_t>> members;
  for (const std::string& name : names) {
    std::vector<std::size_t> unit;
    for (const at::Tensor& p : model.parameters(name)) {
      const auto found = index.find(p.unsafeGetTensorImpl());
      if (found != index.end()) unit.push_back(found->second);  // frozen parameters stay on every rank
    }
    members.push_back(std::move(unit));
  }
  set_units(names, std::move(members));
  model.set_hooks(hooks_);
}

std::vector<bool> Fsdp::held_between_steps(const std::vector<at::Tensor>& params) const {
  BELLOWS_CHECK(on_demand_.size() == params.size(), "Fsdp::held_between_steps() before shard()", "call shard() first");
  std::vector<bool> held(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) held[i] = !on_demand_[i] || owners_[i] == rank();
  return held;
}

void Fsdp::set_units(std::vector<std::string> names, std::vector<std::vector<std::size_t>> params) {
  BELLOWS_CHECK(names.size() == params.size(), "Fsdp::set_units: one parameter list per unit", "report this bug");
  units_.clear();
  unit_index_.clear();
  for (std::size_t u = 0; u < names.size(); ++u) {
    Unit unit;
    unit.name = names[u];
    unit.params = std::move(params[u]);
    unit_index_.emplace(unit.name, units_.size());
    units_.push_back(std::move(unit));
  }
}

std::vector<bool> Fsdp::shard(const std::vector<at::Tensor>& params) {
  params_ = params;
  unit_of_.assign(params.size(), kNoUnit);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    for (const std::size_t i : units_[u].params) {
      BELLOWS_CHECK(i < params.size(), fmt::format("fsdp unit {} names parameter {} of {}", units_[u].name, i, params.size()),
                    "report this bug");
      BELLOWS_CHECK_CONFIG(unit_of_[i] == kNoUnit,
                           fmt::format("dist.strategy fsdp: a parameter belongs to both unit {} and unit {} (a tied weight)",
                                       units_[unit_of_[i]].name, units_[u].name),
                           "leave one of the two blocks out of dist.fsdp_units");
      const at::Tensor& p = params[i];
      BELLOWS_CHECK_CONFIG(p.storage_offset() == 0 && p.storage().nbytes() == static_cast<std::size_t>(p.numel()) * p.element_size() &&
                               p.is_non_overlapping_and_dense(),
                           fmt::format("dist.strategy fsdp: a parameter of unit {} shares its storage with other tensors, so its "
                                       "memory cannot be released alone",
                                       units_[u].name),
                           "leave that block out of dist.fsdp_units");
      unit_of_[i] = u;
    }
  }
  on_demand_.assign(params.size(), false);
  for (std::size_t i = 0; i < params.size(); ++i) on_demand_[i] = unit_of_[i] != kNoUnit;
  std::vector<bool> mine = Zero::shard(params);
  for (Unit& u : units_) {
    u.remote.clear();
    for (const std::size_t i : u.params) {
      if (!mine[i]) u.remote.push_back(i);
    }
    u.flats = flats_of(params, u.params);
  }
  return mine;
}

std::string Fsdp::describe() const {
  std::string text = Zero::describe();
  if (units_.empty()) return text;  // before the trainer named the units
  std::int64_t in_units = 0;
  for (const Unit& u : units_) {
    for (const std::size_t i : u.params) in_units += params_[i].numel();
  }
  std::int64_t total = 0;
  for (const auto& p : params_) total += p.numel();
  return text + fmt::format("; {} units ({} of {} trainable elements gathered when used)", units_.size(), in_units, total);
}

Fsdp::Unit* Fsdp::find(const std::string& name) {
  const auto it = unit_index_.find(name);
  return it == unit_index_.end() ? nullptr : &units_[it->second];
}

void Fsdp::launch(Unit& u) {
  if (!u.pending.empty()) return;
  at::NoGradGuard no_grad;
  for (const Flat& f : u.flats) {
    at::Tensor buffer;
    if (f.owner == rank()) {
      std::vector<at::Tensor> pieces;
      for (const at::Tensor& p : f.params) pieces.push_back(memory_order(p));
      buffer = at::cat(pieces);
    } else {
      buffer = at::empty({f.numel}, f.params.front().options().requires_grad(false));
    }
    u.pending.push_back(ddp_->broadcast_parameters(buffer, f.owner, fmt::format("gather of unit {}'s parameters from rank {}", u.name, f.owner)));
    u.buffers.push_back(std::move(buffer));
  }
}

void Fsdp::complete(Unit& u) {
  launch(u);
  at::NoGradGuard no_grad;
  for (auto& p : u.pending) p->wait();
  for (std::size_t k = 0; k < u.flats.size(); ++k) {
    const Flat& f = u.flats[k];
    if (f.owner == rank()) continue;
    std::int64_t offset = 0;
    for (const at::Tensor& p : f.params) {
      fill_storage(p, u.buffers[k].narrow(0, offset, p.numel()));
      offset += p.numel();
    }
  }
  u.pending.clear();
  u.buffers.clear();
}

void Fsdp::release(Unit& u) {
  for (const std::size_t i : u.remote) free_storage(params_[i]);
}

void Fsdp::before_forward(const std::string& name) {
  if (!armed_) return;
  Unit* u = find(name);
  if (u == nullptr) return;
  // Every forward of a unit gathers (also where this rank still holds it): the ranks' collectives stay in step.
  launch(*u);
  const auto next = static_cast<std::size_t>(u - units_.data()) + 1;
  if (next < units_.size()) launch(units_[next]);  // prefetch: overlaps this unit's compute
  const auto t0 = std::chrono::steady_clock::now();
  complete(*u);
  gather_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Fsdp::after_forward(const std::string& name) {
  if (!armed_) return;
  if (Unit* u = find(name)) release(*u);
}

void Fsdp::before_backward(const std::string& name) {
  if (!armed_) return;
  Unit* u = find(name);
  if (u == nullptr) return;
  launch(*u);
  const auto index = static_cast<std::size_t>(u - units_.data());
  if (index > 0) launch(units_[index - 1]);  // backward runs the units in reverse
  const auto t0 = std::chrono::steady_clock::now();
  complete(*u);
  gather_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  u->grads_ready = 0;
}

void Fsdp::on_gradient(std::size_t unit) {
  if (!armed_) return;
  Unit& u = units_[unit];
  // Autograd has accumulated every gradient of the unit: nothing in this backward reads its weights again.
  if (++u.grads_ready == u.params.size()) {
    u.grads_ready = 0;
    release(u);
  }
}

void Fsdp::setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) {
  if (armed_) gather_parameters();  // a second fit: replicas are made equal from whole weights
  Zero::setup(model, params);
  grad_hooks_->clear();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (unit_of_[i] != kNoUnit) grad_hooks_->add(params_[i], [this, unit = unit_of_[i]] { on_gradient(unit); });
  }
  release_parameters();
}

void Fsdp::finish_gradients() {
  Zero::finish_gradients();
  ++steps_since_;
  if (!armed_) return;
  // A unit some of whose parameters had no gradient this step was not released by its hooks.
  for (Unit& u : units_) {
    u.grads_ready = 0;
    release(u);
  }
}

std::vector<std::pair<std::string, double>> Fsdp::metrics() {
  std::vector<std::pair<std::string, double>> m = Zero::metrics();
  const bool host_waits = params_.empty() || !params_.front().is_cuda();  // NCCL's waits are stream-ordered
  if (steps_since_ > 0 && host_waits) m.emplace_back("gather_wait_ms", 1000 * gather_wait_s_ / static_cast<double>(steps_since_));
  gather_wait_s_ = 0;
  steps_since_ = 0;
  return m;
}

void Fsdp::gather_parameters() {
  if (!armed_) return;  // every weight is here already
  // Gathers in flight (a prefetch) first, then every unit, in the same order on every rank.
  for (Unit& u : units_) {
    if (!u.pending.empty()) complete(u);
  }
  for (Unit& u : units_) complete(u);
  armed_ = false;
}

void Fsdp::release_parameters() {
  for (Unit& u : units_) {
    BELLOWS_CHECK(u.pending.empty(), fmt::format("fsdp: unit {} released while its gather is in flight", u.name), "report this bug");
    u.grads_ready = 0;
    release(u);
  }
  armed_ = true;
}

}  // namespace bellows::dist
