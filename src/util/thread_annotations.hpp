#pragma once
// Clang's thread-safety analysis (-Wthread-safety): which lock guards which data, checked at compile time.
// Expands to nothing on other compilers. Only the attributes the engine uses are defined.
#if defined(__clang__)
#define PLIMSOLL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PLIMSOLL_THREAD_ANNOTATION(x)
#endif

#define PLIMSOLL_CAPABILITY(name) PLIMSOLL_THREAD_ANNOTATION(capability(name))
#define PLIMSOLL_SCOPED_CAPABILITY PLIMSOLL_THREAD_ANNOTATION(scoped_lockable)
#define PLIMSOLL_GUARDED_BY(lock) PLIMSOLL_THREAD_ANNOTATION(guarded_by(lock))
#define PLIMSOLL_PT_GUARDED_BY(lock) PLIMSOLL_THREAD_ANNOTATION(pt_guarded_by(lock))
#define PLIMSOLL_REQUIRES(...) PLIMSOLL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PLIMSOLL_EXCLUDES(...) PLIMSOLL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PLIMSOLL_ACQUIRE(...) PLIMSOLL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PLIMSOLL_RELEASE(...) PLIMSOLL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PLIMSOLL_NO_THREAD_SAFETY_ANALYSIS PLIMSOLL_THREAD_ANNOTATION(no_thread_safety_analysis)
