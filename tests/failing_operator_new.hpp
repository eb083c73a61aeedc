#pragma once
// Injected host-memory failures for a test program: replaces the global operator new (every replaceable form) in
// the test program that includes this header (from one source file only). While
// `t_fail_new` is set, every allocation on this thread fails (std::bad_alloc, or null for the nothrow forms). A seam
// that costs the library nothing.
#include <cstddef>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

// A sanitizer runtime links its own operator new and delete whole (they cannot be replaced beside it): there, the
// tests skip, and the plain builds (GCC and Clang, CI's test phase) run them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PLIMSOLL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define PLIMSOLL_TEST_SANITIZED 1
#endif
#endif

namespace {
thread_local bool t_fail_new = false;
thread_local int t_fail_next_news = 0;  // while above 0, this thread's next allocation fails and counts it down
// At 0 or above: that many more allocations of this thread succeed, then one fails (and it goes back to -1). A test
// walks every allocation of an operation with it: 0, 1, 2... until the operation no longer fails.
thread_local int t_news_before_failure = -1;

/// Every allocation on this thread fails while one lives.
class ScopedFailures {
 public:
  ScopedFailures() { t_fail_new = true; }
  ~ScopedFailures() { t_fail_new = false; }
  ScopedFailures(const ScopedFailures&) = delete;
  ScopedFailures& operator=(const ScopedFailures&) = delete;
};
}  // namespace

#if !defined(PLIMSOLL_TEST_SANITIZED)

// Every replaceable form, so a sanitizer runtime's own definitions (one archive member with all of them) are not
// linked beside these: the allocations still reach the sanitizer through malloc.
namespace {
void* allocate_or_null(std::size_t bytes, std::size_t alignment) noexcept {
  if (t_fail_new) return nullptr;
  if (t_fail_next_news > 0) {
    --t_fail_next_news;
    return nullptr;
  }
  if (t_news_before_failure >= 0 && t_news_before_failure-- == 0) return nullptr;
  if (bytes == 0) bytes = 1;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(bytes);
  void* p = nullptr;
  return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
}
void* allocate_or_throw(std::size_t bytes, std::size_t alignment) {
  if (void* p = allocate_or_null(bytes, alignment)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new[](std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

namespace {
#if defined(PLIMSOLL_TEST_SANITIZED)
constexpr bool kCanFailNew = false;
#else
constexpr bool kCanFailNew = true;
#endif
#define SKIP_UNLESS_NEW_CAN_FAIL() \
  if (!kCanFailNew) GTEST_SKIP() << "a sanitizer's runtime owns operator new here: no failure can be injected"
}  // namespace
