/* Proves plimsoll.h is valid C (compiled as C99 with -Wpedantic) and that a C program can use the ABI:
 * get a device, allocate, read stats, free, and read the message of a failed call. Exits 0 on success. */
#include <stdio.h>
#include <string.h>

#include "plimsoll/plimsoll.h"

static int check(int ok, const char* what) {
  if (!ok) fprintf(stderr, "c_api_smoke: %s failed: %s\n", what, plimsoll_last_error());
  return ok ? 0 : 1;
}

int main(void) {
  plimsoll_device* device = NULL;
  plimsoll_stats stats;
  void* block = NULL;
  int failures = 0;

  failures += check(plimsoll_get_device("sim:1GiB", &device) == PLIMSOLL_OK, "plimsoll_get_device");
  if (device == NULL) return 1;
  failures += check(plimsoll_allocate(device, 1u << 20, "c-smoke", &block) == PLIMSOLL_OK, "plimsoll_allocate");
  failures += check(plimsoll_get_stats(device, &stats) == PLIMSOLL_OK, "plimsoll_get_stats");
  failures += check(stats.live_allocations == 1, "one live allocation");
  failures += check(plimsoll_free(device, block) == PLIMSOLL_OK, "plimsoll_free");

  failures += check(plimsoll_get_device("not-a-device", &device) == PLIMSOLL_INVALID_ARGUMENT,
                    "plimsoll_get_device refusing a bad name");
  failures += check(strstr(plimsoll_last_error(), "not-a-device") != NULL, "the message naming the bad name");
  return failures == 0 ? 0 : 1;
}
