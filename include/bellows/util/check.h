// The check-macro family: every precondition in bellows is one of these, so that every failure carries a
// kind, a message naming the offending file/key/value, and a hint. Messages are built only on failure.
//   BELLOWS_CHECK(n > 0, fmt::format("batch_size is {}", n), "set data.batch_size to a positive integer");
#pragma once

#include <source_location>
#include <string>

#include "bellows/util/error.h"  // defines: Error, ErrorKind

namespace bellows::detail {
[[noreturn]] void raise(ErrorKind kind, std::string message, std::string hint, std::source_location where);
}  // namespace bellows::detail

#define BELLOWS_CHECK_KIND(kind, cond, message, hint)                                              \
  do {                                                                                             \
    if (!(cond)) [[unlikely]] {                                                                    \
      ::bellows::detail::raise((kind), (message), (hint), std::source_location::current());        \
    }                                                                                              \
  } while (false)

#define BELLOWS_CHECK(cond, message, hint) \
  BELLOWS_CHECK_KIND(::bellows::ErrorKind::kInternal, cond, message, hint)
#define BELLOWS_CHECK_USAGE(cond, message, hint) \
  BELLOWS_CHECK_KIND(::bellows::ErrorKind::kUsage, cond, message, hint)
#define BELLOWS_CHECK_CONFIG(cond, message, hint) \
  BELLOWS_CHECK_KIND(::bellows::ErrorKind::kConfig, cond, message, hint)
#define BELLOWS_CHECK_DATA(cond, message, hint) \
  BELLOWS_CHECK_KIND(::bellows::ErrorKind::kData, cond, message, hint)
#define BELLOWS_CHECK_RESOURCE(cond, message, hint) \
  BELLOWS_CHECK_KIND(::bellows::ErrorKind::kResource, cond, message, hint)

// Unconditional failure of the given kind.
#define BELLOWS_FAIL(kind, message, hint) \
  ::bellows::detail::raise((kind), (message), (hint), std::source_location::current())
