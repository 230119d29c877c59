// The one exception type the bellows library throws. It carries a kind (which the CLI, and only the CLI,
// turns into an exit code), what was wrong, what to do about it, and the source location that raised it.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace bellows {

enum class ErrorKind {
  kInternal,     // a bug or an unexpected failure of a dependency
  kUsage,        // bad command line
  kConfig,       // bad configuration file, key or value
  kData,         // bad or unreadable input data
  kResource,     // out of memory, disk full, device unavailable
  kInterrupted,  // stopped by a signal after a clean checkpoint
};

const char* to_string(ErrorKind kind) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string hint,
        std::source_location where = std::source_location::current());

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& hint() const noexcept { return hint_; }
  const char* file() const noexcept { return file_; }
  unsigned line() const noexcept { return line_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string hint_;
  const char* file_;
  unsigned line_;
};

}  // namespace bellows
