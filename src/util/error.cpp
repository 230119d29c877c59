// Error construction: the what() string is "message [file:line]\n---> HINT: hint" (llm.c's habit).
#include "bellows/util/error.h"

#include <cstring>

#include "bellows/util/check.h"

namespace bellows {
namespace {

const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string compose(const std::string& message, const std::string& hint, const std::source_location& where) {
  std::string text = message;
  text += " [";
  text += basename_of(where.file_name());
  text += ':';
  text += std::to_string(where.line());
  text += ']';
  if (!hint.empty()) {
    text += "\n---> HINT: ";
    text += hint;
  }
  return text;
}

}  // namespace

const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kInternal: return "internal error";
    case ErrorKind::kUsage: return "usage error";
    case ErrorKind::kConfig: return "configuration error";
    case ErrorKind::kData: return "input data error";
    case ErrorKind::kResource: return "resource error";
    case ErrorKind::kInterrupted: return "interrupted";
  }
  return "error";
}

Error::Error(ErrorKind kind, std::string message, std::string hint, std::source_location where)
    : std::runtime_error(compose(message, hint, where)),
      kind_(kind),
      message_(std::move(message)),
      hint_(std::move(hint)),
      file_(basename_of(where.file_name())),
      line_(where.line()) {}

namespace detail {
void raise(ErrorKind kind, std::string message, std::string hint, std::source_location where) {
  throw Error(kind, std::move(message), std::move(hint), where);
}
}  // namespace detail

}  // namespace bellows
