// Exceptions at the boundaries to kinds, messages and hints; see exception_report.h.
#include "bellows/util/exception_report.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <new>

namespace bellows {
namespace {

// LibTorch's messages carry the C++ source location and sometimes a backtrace after the first line(s); the
// user needs the message. what_without_backtrace() drops the backtrace; a trailing location line stays.
std::string first_lines(const c10::Error& e) {
  std::string text = e.what_without_backtrace();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (std::size_t pos = 0; (pos = text.find('\n', pos)) != std::string::npos;) text.replace(pos, 1, " ");
  // An enforce's "[enforce fail at alloc_cpu.cpp:127] err == 0. " names LibTorch's source, not the problem.
  if (text.rfind("[enforce fail at ", 0) == 0) {
    const std::size_t bracket = text.find("] ");
    const std::size_t sentence = bracket == std::string::npos ? std::string::npos : text.find(". ", bracket);
    if (sentence != std::string::npos) text.erase(0, sentence + 2);
  }
  return text;
}

}  // namespace

ExceptionReport report_exception(const std::exception_ptr& error) noexcept {
  ExceptionReport r;
  try {
    try {
      if (error) std::rethrow_exception(error);
      r.message = "no exception";
    } catch (const Error& e) {
      r.kind = e.kind();
      r.message = e.message();
      r.hint = e.hint();
      r.location = fmt::format("{}:{}", e.file(), e.line());
      // A resource error that carries an out-of-memory report (a loader worker's, rewrapped with its batch).
      r.out_of_memory = e.kind() == ErrorKind::kResource && e.message().rfind("out of memory", 0) == 0;
    } catch (const c10::OutOfMemoryError& e) {
      r.kind = ErrorKind::kResource;
      r.out_of_memory = true;
      r.message = "out of memory: " + first_lines(e);
      r.hint = kOutOfMemoryHint;
    } catch (const std::bad_alloc&) {
      r.kind = ErrorKind::kResource;
      r.out_of_memory = true;
      r.message = "out of memory (a host allocation failed)";
      r.hint = kOutOfMemoryHint;
    } catch (const c10::Error& e) {
      // The CPU allocator's failure is an enforce (c10::Error), not an OutOfMemoryError: known by its text.
      const std::string text = first_lines(e);
      r.out_of_memory = text.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
                        text.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
      r.kind = r.out_of_memory ? ErrorKind::kResource : ErrorKind::kInternal;
      r.message = (r.out_of_memory ? "out of memory: " : "LibTorch: ") + text;
      if (r.out_of_memory) r.hint = kOutOfMemoryHint;
    } catch (const std::exception& e) {
      r.kind = ErrorKind::kInternal;
      r.message = e.what();
      r.message = r.message.substr(0, r.message.find('\n'));  // the first line: what went wrong, not a backtrace
    } catch (...) {
      r.kind = ErrorKind::kInternal;
      r.message = "an unknown exception";
    }
  } catch (...) {  // formatting the report itself failed (no memory left for the strings)
    r.kind = ErrorKind::kResource;
    r.message.clear();
    r.out_of_memory = true;
  }
  return r;
}

}  // namespace bellows
