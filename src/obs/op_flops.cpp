// The FLOPs of the ops LibTorch's profiler does not count; see internal/op_flops.h. The conventions are the
// profiler's own (conv2d: 2 x N x C_out x output positions x C_in/groups x kernel, matched exactly by a test) and
// those of PyTorch's torch.utils.flop_counter for the backward and for attention.
#include "obs/internal/op_flops.h"

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

namespace bellows::obs::internal {
namespace {

using Shapes = c10::ArrayRef<std::vector<std::int64_t>>;
using Args = c10::ArrayRef<c10::IValue>;

double product(const std::vector<std::int64_t>& v, std::size_t from = 0) {
  double p = 1;
  for (std::size_t i = from; i < v.size(); ++i) p *= static_cast<double>(v[i]);
  return p;
}

const std::vector<std::int64_t>* shape_at(Shapes shapes, std::size_t i) {
  return i < shapes.size() && !shapes[i].empty() ? &shapes[i] : nullptr;
}

std::optional<std::vector<std::int64_t>> int_list_at(Args args, std::size_t i) {
  if (i >= args.size() || !args[i].isIntList()) return std::nullopt;
  return args[i].toIntVector();
}

std::optional<bool> bool_at(Args args, std::size_t i) {
  if (i >= args.size() || !args[i].isBool()) return std::nullopt;
  return args[i].toBool();
}

// A convolution's parameter for spatial dimension `d`: ATen takes one value for every dimension too.
std::int64_t param(const std::vector<std::int64_t>& list, std::size_t d) { return list.size() == 1 ? list[0] : list.at(d); }

// One convolution's forward FLOPs: 2 x batch x positions x the weight's elements, where the positions are the
// output's for a convolution (each output element is a dot product over C_in/groups x kernel) and the input's for a
// transposed one (each input element is scattered through C_out/groups x kernel weights). `positions` is what the
// caller knows of them; an unbatched input (one dimension fewer than the weight) is a batch of 1.
double convolution_flops(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& weight, double positions) {
  const double batch = input.size() + 1 == weight.size() ? 1.0 : static_cast<double>(input[0]);
  return 2 * batch * positions * product(weight);
}

// The input's spatial extent (all but batch and channels).
double input_positions(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& weight) {
  return product(input, input.size() + 1 == weight.size() ? 1 : 2);
}

// A forward convolution from its input, weight and arguments: stride, padding and dilation at `stride_at`,
// `stride_at + 1`, `stride_at + 2`; transposed where the op says so. nullopt where they were not recorded (a padding
// given as a string, no concrete inputs).
std::optional<double> forward_convolution(Shapes shapes, Args args, std::size_t stride_at, bool transposed) {
  const auto* input = shape_at(shapes, 0);
  const auto* weight = shape_at(shapes, 1);
  if (input == nullptr || weight == nullptr || weight->size() < 3 || input->size() + 1 < weight->size()) return std::nullopt;
  if (transposed) return convolution_flops(*input, *weight, input_positions(*input, *weight));
  const auto stride = int_list_at(args, stride_at), padding = int_list_at(args, stride_at + 1), dilation = int_list_at(args, stride_at + 2);
  if (!stride || !padding || !dilation || stride->empty() || padding->empty() || dilation->empty()) return std::nullopt;
  const std::size_t dims = weight->size() - 2, first = input->size() - dims;
  double positions = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    if (stride->size() != 1 && stride->size() <= d) return std::nullopt;
    if (padding->size() != 1 && padding->size() <= d) return std::nullopt;
    if (dilation->size() != 1 && dilation->size() <= d) return std::nullopt;
    const std::int64_t span = param(*dilation, d) * ((*weight)[2 + d] - 1) + 1;
    const std::int64_t out = ((*input)[first + d] + 2 * param(*padding, d) - span) / std::max<std::int64_t>(param(*stride, d), 1) + 1;
    positions *= static_cast<double>(std::max<std::int64_t>(out, 0));
  }
  return convolution_flops(*input, *weight, positions);
}

// aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
// output_padding, groups, output_mask): one forward's FLOPs for each of the input's and the weight's gradients it
// computes (output_mask; the bias's gradient is a sum, which the profiler does not count for addmm's either). The
// forward's output is grad_output, so no argument but `transposed` is needed.
std::optional<double> convolution_backward(Shapes shapes, Args args) {
  const auto* grad_output = shape_at(shapes, 0);
  const auto* input = shape_at(shapes, 1);
  const auto* weight = shape_at(shapes, 2);
  const std::optional<bool> transposed = bool_at(args, 7);
  if (grad_output == nullptr || input == nullptr || weight == nullptr || weight->size() < 3 || !transposed) return std::nullopt;
  const double forward = convolution_flops(*input, *weight, *transposed ? input_positions(*input, *weight) : input_positions(*grad_output, *weight));
  int gradients = 2;
  if (args.size() > 10 && args[10].isBoolList()) {
    const c10::List<bool> mask = args[10].toBoolList();
    gradients = (mask.size() > 0 && mask.get(0) ? 1 : 0) + (mask.size() > 1 && mask.get(1) ? 1 : 0);
  }
  return gradients * forward;
}

// Matrix products by their operands' shapes: `a` [.., M, K] times `b` [.., K, N] (a vector for N = 1), over the
// batch of `a`'s leading dimensions.
std::optional<double> product_flops(Shapes shapes, std::size_t a_at, std::size_t b_at) {
  const auto* a = shape_at(shapes, a_at);
  const auto* b = shape_at(shapes, b_at);
  if (a == nullptr || b == nullptr) return std::nullopt;
  const double n = b->size() >= 2 ? static_cast<double>(b->back()) : 1.0;
  return 2 * product(*a) * n;
}

// A fused attention kernel, forward: QK^T and the weights times V, 2 x batch x heads x queries x keys x (head width
// of q + of v); its backward computes four such products, twice the forward. q, k, v are [batch, heads, length,
// width] at `q_at`, `q_at + 1`, `q_at + 2`.
std::optional<double> attention_flops(Shapes shapes, std::size_t q_at, double times) {
  const auto* q = shape_at(shapes, q_at);
  const auto* k = shape_at(shapes, q_at + 1);
  const auto* v = shape_at(shapes, q_at + 2);
  if (q == nullptr || k == nullptr || v == nullptr || q->size() < 2 || k->size() < 2 || v->size() < 2) return std::nullopt;
  const double keys = static_cast<double>((*k)[k->size() - 2]);
  return times * 2 * product(*q) / static_cast<double>(q->back()) * keys * static_cast<double>(q->back() + v->back());
}

using Formula = std::function<std::optional<double>(Shapes, Args)>;

const std::unordered_map<std::string_view, Formula>& formulas() {
  static const std::unordered_map<std::string_view, Formula> table = [] {
    std::unordered_map<std::string_view, Formula> t;
    // conv1d/2d/3d(input, weight, bias, stride, padding, dilation, groups). aten::conv2d is the profiler's, but it
    // counts 0 where it could not keep the arguments; this then counts it.
    for (const std::string_view name : {"aten::conv1d", "aten::conv2d", "aten::conv3d"}) {
      t[name] = [](Shapes s, Args a) { return forward_convolution(s, a, 3, false); };
    }
    // conv_transpose1d/2d/3d(input, weight, ...): the input's positions, no argument needed.
    for (const std::string_view name : {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}) {
      t[name] = [](Shapes s, Args a) { return forward_convolution(s, a, 3, true); };
    }
    // convolution and _convolution(input, weight, bias, stride, padding, dilation, transposed, ...): what every
    // convolution above runs, and what a traced model calls itself. The backends' own ops (mkldnn_convolution,
    // cudnn_convolution, ...) always run inside one of these, which counts them.
    for (const std::string_view name : {"aten::convolution", "aten::_convolution"}) {
      t[name] = [](Shapes s, Args a) -> std::optional<double> {
        const std::optional<bool> transposed = bool_at(a, 6);
        if (!transposed) return std::nullopt;
        return forward_convolution(s, a, 3, *transposed);
      };
    }
    t["aten::convolution_backward"] = convolution_backward;
    // Products the profiler leaves out; matmul, linear and einsum run mm/addmm/bmm inside, which it counts.
    t["aten::mv"] = [](Shapes s, Args) { return product_flops(s, 0, 1); };
    t["aten::dot"] = t["aten::vdot"] = [](Shapes s, Args) { return product_flops(s, 0, 1); };
    t["aten::addmv"] = t["aten::addmv_"] = [](Shapes s, Args) { return product_flops(s, 1, 2); };
    t["aten::addmm_"] = t["aten::_addmm_activation"] = [](Shapes s, Args) { return product_flops(s, 1, 2); };
    t["aten::addbmm"] = t["aten::addbmm_"] = t["aten::baddbmm_"] = [](Shapes s, Args) { return product_flops(s, 1, 2); };
    // The fused attention kernels scaled_dot_product_attention runs (q, k, v first; the backward's after grad_out).
    for (const std::string_view name : {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
                                        "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention"}) {
      t[name] = [](Shapes s, Args) { return attention_flops(s, 0, 1); };
    }
    for (const std::string_view name :
         {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::_scaled_dot_product_flash_attention_backward",
          "aten::_scaled_dot_product_efficient_attention_backward", "aten::_scaled_dot_product_cudnn_attention_backward"}) {
      t[name] = [](Shapes s, Args) { return attention_flops(s, 1, 2); };
    }
    return t;
  }();
  return table;
}

}  // namespace

double uncounted_op_flops(std::string_view name, Shapes shapes, Args args) {
  const auto& table = formulas();
  const auto it = table.find(name);
  if (it == table.end()) return 0;
  return it->second(shapes, args).value_or(0.0);
}

}  // namespace bellows::obs::internal
