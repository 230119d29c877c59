// What an exception that reached a boundary means for the user: the CLI's main() and the C API's entry points
// both ask here, so an out-of-memory error is a resource error (exit code 4, BELLOWS_ERR_RESOURCE) with a hint
// wherever it surfaces, and a LibTorch error is reported by its first line rather than a page of backtrace.
//   catch (...) { const ExceptionReport r = report_current_exception(); ... r.kind, r.message, r.hint ... }
#pragma once

#include <exception>
#include <string>

#include "bellows/util/error.h"  // defines: ErrorKind

namespace bellows {

struct ExceptionReport {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;   // one line: what went wrong
  std::string hint;      // what to do ("" none)
  std::string location;  // "file:line" of a bellows::Error ("" otherwise)
  bool out_of_memory = false;  // also a bellows resource error whose message starts "out of memory" (rewrapped)
};

// bellows::Error as it is; std::bad_alloc and LibTorch's out-of-memory errors (c10::OutOfMemoryError from CUDA's
// caching allocator; the CPU allocator's failed enforce, a c10::Error known by its text) as kResource with a hint to
// shrink the step; other LibTorch errors
// (c10::Error) as kInternal with their message up to the first backtrace line; anything else as kInternal.
ExceptionReport report_exception(const std::exception_ptr& error) noexcept;
inline ExceptionReport report_current_exception() noexcept { return report_exception(std::current_exception()); }

// A LibTorch error as one readable paragraph: c10::Error's message without its backtrace; the TorchScript
// interpreter's ("The following operation failed in the TorchScript interpreter." and two tracebacks) as its
// final error line and where the model's source raised it: "RuntimeError: ... (in forward, /src/model.py line 9:
// h = self.c1(signal))". Other exceptions: their what(). report_exception() words LibTorch's errors this way.
std::string describe_libtorch_error(const std::exception& e);

// The hint given with every out-of-memory report.
inline constexpr const char* kOutOfMemoryHint =
    "reduce data.batch_size (keeping the effective batch with train.accumulation_steps), turn on activation checkpointing "
    "(checkpointing: ['*']), or use precision: bf16-mixed; `bellows doctor` measures the memory headroom";

}  // namespace bellows
