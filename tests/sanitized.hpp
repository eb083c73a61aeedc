#pragma once
// PLIMSOLL_SANITIZED is defined in builds with AddressSanitizer or ThreadSanitizer (GCC spells the test one way,
// Clang the other). Tests that push the process to a kernel limit skip there: the sanitizer's own allocator needs
// the memory or mappings the test has just used up, and aborts where the library would have reported.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PLIMSOLL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PLIMSOLL_SANITIZED 1
#endif
#endif

// PLIMSOLL_TEST_UNDER_TSAN is defined in builds with ThreadSanitizer: it refuses a thread started in the child of a
// multi-threaded fork ("starting new threads after multi-threaded fork is not supported", exit 66), so fork tests
// leave that part to the plain builds, and it does not model membarrier (the thread caches' barrier is a fence there).
#if defined(__SANITIZE_THREAD__)
#define PLIMSOLL_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PLIMSOLL_TEST_UNDER_TSAN 1
#endif
#endif
