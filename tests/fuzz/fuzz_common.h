// Shared by the libFuzzer harnesses in tests/fuzz/: the per-process scratch directory, writing an input to a
// file there, the one-time setup (one intra-op thread), the start of every input (take, input_file), the handling
// of a rejected input (a bellows::Error is the expected answer to bad input), and the few harness-defined
// invariants that abort with a message when broken.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "bellows/util/error.h"  // defines: Error, ErrorKind

namespace bellows::fuzz {

namespace fs = std::filesystem;

// Inputs over this size are ignored (the per-input work stays small; libFuzzer's -max_len should be below it).
inline constexpr std::size_t kMaxInput = std::size_t{1} << 20;

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

// BELLOWS_FUZZ_VERBOSE=1: print every rejection (useful when checking a corpus by hand: `./bellows_fuzz_csv seeds/*`).
inline bool verbose() {
  static const bool v = env_flag("BELLOWS_FUZZ_VERBOSE");
  return v;
}

// BELLOWS_FUZZ_NO_INVARIANTS=1: skip the harness-defined consistency checks (round trips, shapes), keep only
// "no exception but bellows::Error, no crash".
inline bool invariants_enabled() {
  static const bool v = !env_flag("BELLOWS_FUZZ_NO_INVARIANTS");
  return v;
}

// BELLOWS_FUZZ_INTERNAL_IS_BUG=1: a bellows::Error of kind kInternal ("a bug") counts as a finding too.
inline bool internal_is_bug() {
  static const bool v = env_flag("BELLOWS_FUZZ_INTERNAL_IS_BUG");
  return v;
}

// /tmp/bellows-fuzz-<pid>/, made once and removed at exit (a crash leaves it for inspection). The path lives on
// the heap and is never destroyed, so the atexit handler may use it whatever the order of static destruction.
inline const fs::path& scratch_dir() {
  static const fs::path* dir = [] {
    auto* d = new fs::path(fs::temp_directory_path() / ("bellows-fuzz-" + std::to_string(::getpid())));
    std::error_code ec;
    fs::remove_all(*d, ec);
    fs::create_directories(*d, ec);
    if (ec) {
      std::fprintf(stderr, "bellows-fuzz: cannot create %s: %s\n", d->c_str(), ec.message().c_str());
      std::abort();
    }
    return d;
  }();
  return *dir;
}

inline void remove_scratch_dir() {
  std::error_code ec;
  fs::remove_all(scratch_dir(), ec);
}

// Replaces `path` with these bytes. The old file is unlinked first, so a mapping of it that is still alive
// keeps the old inode (no SIGBUS from a file that shrank under it) and nothing grows run after run.
inline void write_file(const fs::path& path, const void* data, std::size_t size) {
  ::unlink(path.c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::fprintf(stderr, "bellows-fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}
inline void write_file(const fs::path& path, std::string_view bytes) { write_file(path, bytes.data(), bytes.size()); }

// Once per process: one intra-op thread, the scratch directory, caches ($BELLOWS_CACHE) inside it.
inline void init() {
  static const bool done = [] {
    at::set_num_threads(1);
    const fs::path& dir = scratch_dir();
    std::error_code ec;
    fs::create_directories(dir / "cache", ec);
    ::setenv("BELLOWS_CACHE", (dir / "cache").c_str(), 1);
    std::atexit(remove_scratch_dir);
    return true;
  }();
  (void)done;
}

// The start of every LLVMFuzzerTestOneInput: false for an input to skip (over kMaxInput, or shorter than its
// `header` of option bytes); else true, with the one-time setup done (so no harness needs LLVMFuzzerInitialize
// for it).
inline bool take(std::size_t size, std::size_t header = 0) {
  if (size < header || size > kMaxInput) return false;
  init();
  return true;
}

// The start of a harness that reads its input from a file: take()'s check, then the bytes after the `header`
// written to `name` in the scratch directory. The file's path, or an empty path for an input to skip.
inline fs::path input_file(const std::uint8_t* data, std::size_t size, const std::string& name, std::size_t header = 0) {
  if (!take(size, header)) return {};
  const fs::path path = scratch_dir() / name;
  write_file(path, data + header, size - header);
  return path;
}

// The expected rejection of bad input. Returns 0 for LLVMFuzzerTestOneInput.
inline int rejected(const Error& e) {
  if (verbose()) std::fprintf(stderr, "bellows-fuzz: rejected (%s): %s\n", to_string(e.kind()), e.what());
  if (internal_is_bug() && e.kind() == ErrorKind::kInternal) {
    std::fprintf(stderr, "bellows-fuzz: kInternal error (BELLOWS_FUZZ_INTERNAL_IS_BUG is set): %s\n", e.what());
    std::abort();
  }
  return 0;
}

// A harness-defined property that does not hold: a finding.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "bellows-fuzz: invariant violated: %s\n", what.c_str());
  std::abort();
}
inline void expect(bool cond, const std::string& what) {
  if (!cond && invariants_enabled()) violated(what);
}

// Where touch() leaves its sum, so that the reads are not optimised away.
inline volatile unsigned touch_sink = 0;

// Reads every byte of a tensor's data (contiguous copy first when needed), so that a tensor over a mapping that
// ends early faults here (SIGBUS) and one over a short heap buffer is caught by ASan.
inline void touch(const at::Tensor& t) {
  if (!t.defined()) return;
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  const std::size_t n = c.nbytes();
  if (n == 0) return;
  const auto* p = static_cast<const unsigned char*>(c.const_data_ptr());
  unsigned acc = 0;
  for (std::size_t i = 0; i < n; ++i) acc += p[i];
  touch_sink = acc;
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace bellows::fuzz
