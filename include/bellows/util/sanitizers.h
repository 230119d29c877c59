// Whether this build runs under a sanitizer runtime (ASan or TSan), which replaces malloc and friends: code that
// talks to glibc's allocator directly (malloc_trim) or asks the loader for RTLD_DEEPBIND must not in such builds.
#pragma once

namespace bellows::util {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

}  // namespace bellows::util
