// A rule's view of one group's step (update_rule.h): the Optimizer's groups, learning rate, state and step counts,
// and the helpers the rules' kernel calls share.
#include "bellows/train/update_rule.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iterator>

namespace bellows::train {

GroupStep::GroupStep(Optimizer& optimizer, std::size_t group, const at::Tensor& found_inf)
    : optimizer_(optimizer), g_(group), grads_(optimizer.groups_[group].params.size()), found_inf_(found_inf) {
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    grads_[i] = optimizer_.kernel_gradient(g_, i);
    if (grads_[i].defined()) active_.push_back(i);
  }
}

const ParamGroup& GroupStep::group() const { return optimizer_.groups_[g_]; }
bool GroupStep::fused() const { return optimizer_.fused_; }
double GroupStep::lr() const { return optimizer_.lr_; }
const at::Tensor& GroupStep::lr_tensor() const { return optimizer_.lr_tensor_; }
std::vector<at::Tensor>& GroupStep::state(std::size_t kind) { return optimizer_.state_.at(kind)[g_]; }
std::vector<at::Tensor>& GroupStep::steps() { return optimizer_.state_steps_[g_]; }
const at::Tensor& GroupStep::steps_of(std::size_t i) const { return optimizer_.state_steps_[g_][i]; }

void GroupStep::start(std::size_t i) {
  optimizer_.state_steps_[g_][i] = optimizer_.new_step_tensor(optimizer_.step_buffers_, g_, i);
}

void GroupStep::count_updates() { optimizer_.count_updates(g_, active_, {}, /*take_back=*/false); }
void GroupStep::take_back_skipped() { optimizer_.count_updates(g_, active_, found_inf_, /*take_back=*/true); }

bool GroupStep::whole_group_in_one_call() const {
  return optimizer_.fused_ && optimizer_.step_buffers_[g_].defined() && optimizer_.uniform_dtype_[g_] &&
         active_.size() == group().params.size();
}

// Few buckets, so a linear search.
std::vector<std::vector<std::size_t>> device_dtype_buckets(const std::vector<at::Tensor>& params,
                                                           const std::vector<std::size_t>& active) {
  std::vector<std::pair<std::pair<c10::Device, at::ScalarType>, std::vector<std::size_t>>> out;
  for (std::size_t i : active) {
    const auto key = std::make_pair(params[i].device(), params[i].scalar_type());
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& b) { return b.first == key; });
    if (it == out.end()) {
      out.push_back({key, {}});
      it = std::prev(out.end());
    }
    it->second.push_back(i);
  }
  std::vector<std::vector<std::size_t>> result;
  for (auto& b : out) result.push_back(std::move(b.second));
  return result;
}

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& from, const std::vector<std::size_t>& idx) {
  std::vector<at::Tensor> out;
  out.reserve(idx.size());
  for (std::size_t i : idx) out.push_back(from[i]);
  return out;
}

std::optional<at::Tensor> on_device_of(const at::Tensor& found_inf, const at::Tensor& param) {
  if (!found_inf.defined()) return std::nullopt;
  return found_inf.to(param.device(), /*non_blocking=*/true);
}

}  // namespace bellows::train
