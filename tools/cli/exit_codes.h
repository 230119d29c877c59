// The CLI's exit codes (docs/architecture.md): the only place where errors become process exit statuses.
#pragma once

#include "bellows/util/error.h"  // defines: ErrorKind

namespace bellows::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // usage or configuration error
inline constexpr int kExitData = 3;
inline constexpr int kExitResource = 4;
inline constexpr int kExitInterrupted = 5;
inline constexpr int kExitSignal = 130;  // stopped by SIGINT/SIGTERM without a checkpoint (128 + SIGINT)

constexpr int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
    case ErrorKind::kConfig: return kExitUsage;
    case ErrorKind::kData: return kExitData;
    case ErrorKind::kResource: return kExitResource;
    case ErrorKind::kInterrupted: return kExitInterrupted;
    case ErrorKind::kInternal: return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace bellows::cli
