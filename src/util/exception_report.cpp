// Exceptions at the boundaries to kinds, messages and hints; see exception_report.h.
#include "bellows/util/exception_report.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <new>
#include <string>
#include <vector>

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

// The interpreter's message: its last "...Error: ..." line (what went wrong) and the first frame of the original
// code's traceback (the user's source; else the serialized code's): file, line, function and the marked line.
// Written here because LibTorch gives the traceback as text only.
std::string summarize_interpreter_error(const std::string& text) {
  std::vector<std::string> lines;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t nl = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  std::string error;
  std::size_t error_at = lines.size();
  for (std::size_t i = lines.size(); i-- > 0;) {
    const std::string& l = lines[i];
    const std::size_t colon = l.find(": ");
    if (colon != std::string::npos && colon > 0 && l[0] != ' ' && l.substr(0, colon).ends_with("Error")) {
      error_at = i;
      break;
    }
  }
  for (std::size_t i = error_at; i < lines.size(); ++i) {
    if (!lines[i].empty()) error += (error.empty() ? "" : " ") + lines[i];
  }
  // The frame: the original code's first File line if there is one, else the serialized code's.
  std::size_t frame = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("Traceback of TorchScript, original code", 0) == 0 || (frame == lines.size() && lines[i].rfind("Traceback of TorchScript", 0) == 0)) {
      for (std::size_t j = i + 1; j < lines.size(); ++j) {
        if (lines[j].rfind("  File \"", 0) == 0) {
          frame = j;
          break;
        }
      }
    }
  }
  std::string where;
  if (frame < lines.size()) {
    where = lines[frame].substr(2);  // File "x.py", line 9, in forward
    for (std::size_t j = frame + 1; j < lines.size() && lines[j].rfind("  File ", 0) != 0; ++j) {
      if (lines[j].find("<--- HERE") != std::string::npos && j > frame + 1) {
        std::string code = lines[j - 1];
        code.erase(0, code.find_first_not_of(' '));
        where += ": " + code;
        break;
      }
    }
  }
  if (error.empty()) error = lines.empty() ? text : lines.front();
  return where.empty() ? error : fmt::format("{} (model source: {})", error, where);
}

}  // namespace

std::string describe_libtorch_error(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (text.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) return summarize_interpreter_error(text);
  if (c10_error) return first_lines(*c10_error);
  return text.substr(0, text.find('\n'));
}

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
      r.message = r.out_of_memory ? "out of memory: " + text : "LibTorch: " + describe_libtorch_error(e);
      if (r.out_of_memory) r.hint = kOutOfMemoryHint;
    } catch (const std::exception& e) {
      r.kind = ErrorKind::kInternal;
      r.message = describe_libtorch_error(e);  // the first line (not a backtrace), or the interpreter's error and source line
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
