#pragma once
// scripts/test.sh runs the unit suites twice: in the release build, and again under clang's
// AddressSanitizer + UndefinedBehaviorSanitizer at -O1, where they run 10-15x slower. The few
// tests whose loops dominate that run (a random walk per dev schema, a completion per seed) take
// a sample there: the release run covers every input, the sanitizer run looks for memory errors
// and undefined behaviour, which a sample finds as well. (CI's budget is 30 minutes.)
namespace deepinfer::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// `release` in the release build, `sanitized` under the sanitizers.
inline constexpr int release_or_sanitized(int release, int sanitized) { return kUnderSanitizer ? sanitized : release; }

}  // namespace deepinfer::testing
