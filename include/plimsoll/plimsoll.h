/* plimsoll C ABI: configuration, allocation, free and stats for any language.
 * No C++ exception crosses this boundary: every call returns a status code, and plimsoll_last_error()
 * gives the message of the calling thread's last failure. */
#ifndef PLIMSOLL_H
#define PLIMSOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plimsoll_status {
  PLIMSOLL_OK = 0,
  PLIMSOLL_OUT_OF_MEMORY = 1,
  PLIMSOLL_INVALID_ARGUMENT = 2,
  PLIMSOLL_DEVICE_UNAVAILABLE = 3,
  PLIMSOLL_INVALID_STATE = 4,
  PLIMSOLL_INVALID_FREE = 5,
  PLIMSOLL_INTERNAL = 6,
  PLIMSOLL_PAUSE_FAILED = 7 /* pause/resume not carried out (see plimsoll_pause); nothing lost */
} plimsoll_status;

typedef struct plimsoll_device plimsoll_device; /* owned by the runtime; valid until process exit */

typedef struct plimsoll_stats {
  uint64_t in_use_bytes, peak_in_use_bytes, reserved_bytes, peak_reserved_bytes, largest_free_block;
  uint64_t limit_bytes, allocations, frees, ooms, maps, unmaps, live_allocations;
  uint64_t committed_bytes, resident_bytes; /* host devices only: see docs/engine.md, "Host memory" */
  uint64_t address_space_bytes;             /* reserved address space (VIRT), not memory */
} plimsoll_stats;

/* The message of this thread's last failed call ("" if none). Valid until the thread's next call. */
const char* plimsoll_last_error(void);

/* Configuration, before the device's first allocation. Keys: "growth" ("preallocate"|"on_demand"),
 * "memory_limit" (size), "memory_fraction", "reserve" (size), "release_threshold" (size), "thread_cache"
 * (size per thread; host and simulated devices). */
plimsoll_status plimsoll_configure(const char* device, const char* key, const char* value);
/* Loads a JSON config file (see docs/configuration.md); replaces the process's configuration. */
plimsoll_status plimsoll_load_config(const char* path);

plimsoll_status plimsoll_get_device(const char* name, plimsoll_device** out);
plimsoll_status plimsoll_allocate(plimsoll_device* device, size_t bytes, const char* tag, void** out);
plimsoll_status plimsoll_free(plimsoll_device* device, void* ptr);
plimsoll_status plimsoll_trim(plimsoll_device* device, uint64_t* released_bytes);
plimsoll_status plimsoll_get_stats(plimsoll_device* device, plimsoll_stats* out);
/* Pause and resume (docs/engine.md, "Pause and resume"): plimsoll_pause gives the device's memory back while keeping
 * every address reserved (keep_contents != 0: the live contents are copied to host memory first, and back on
 * resume); allocations on a paused device fail with PLIMSOLL_INVALID_STATE. plimsoll_resume maps the memory back at
 * the same addresses. PLIMSOLL_INVALID_STATE: paused twice, resumed while running, or a preallocated device (no
 * growable segments); PLIMSOLL_PAUSE_FAILED: no host memory for the contents, or at resume the memory is not
 * available again (the device stays paused; call plimsoll_resume again later). `unmapped_bytes` may be NULL. */
plimsoll_status plimsoll_pause(plimsoll_device* device, int keep_contents, uint64_t* unmapped_bytes);
plimsoll_status plimsoll_resume(plimsoll_device* device);
/* *paused = 1 while the device is paused, else 0. */
plimsoll_status plimsoll_is_paused(plimsoll_device* device, int* paused);
/* Per-tag bytes in use and peak; PLIMSOLL_INVALID_ARGUMENT for an unknown tag. */
plimsoll_status plimsoll_get_tag_stats(plimsoll_device* device, const char* tag, uint64_t* in_use, uint64_t* peak);

#ifdef __cplusplus
}
#endif
#endif /* PLIMSOLL_H */
