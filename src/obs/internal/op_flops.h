// The FLOPs of the ops LibTorch's profiler leaves at 0, from what it recorded of them: its with_flops counts only
// aten::conv2d, mm, addmm, bmm, baddbmm, mul and add, so a Conv1d, a transposed convolution, every convolution's
// backward and the fused attention kernels would count nothing (a scripted 1-D CNN read 1000x too few FLOPs).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace bellows::obs::internal {

// The FLOPs of one recorded op (a multiply-add is 2, as the profiler counts): the convolution family (conv1d,
// conv2d, conv3d, conv_transpose1d/2d/3d, convolution, _convolution: 2 x batch x output positions x the weight's
// elements; a transposed one over its input positions) and its backward (aten::convolution_backward: one forward's
// worth per gradient it computes, of the input and of the weight); the matrix products the profiler misses
// (mv, addmv, dot, vdot, addbmm, the in-place addmm_ and baddbmm_, _addmm_activation); the fused attention
// kernels (2 x 2 x batch x heads x queries x keys x head width forward, twice that backward). `shapes` are the
// op's input shapes (empty for a non-tensor), `args` its recorded scalar and list arguments (None for a tensor).
// 0 for any other op, or where what was recorded does not give the count (a padding given as "same", the
// arguments not recorded): the ops the call runs inside are then counted instead.
double uncounted_op_flops(std::string_view name, c10::ArrayRef<std::vector<std::int64_t>> shapes, c10::ArrayRef<c10::IValue> args);

}  // namespace bellows::obs::internal
