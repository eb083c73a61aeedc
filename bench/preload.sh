# shellcheck shell=bash
# Sourced by the bench scripts: where jemalloc and mimalloc live, for LD_PRELOAD into the malloc benchmarks.
# preload_path SONAME: sets PRELOAD_PATH, or stops the script with the fix.
preload_path() {
  local soname="$1" candidate
  for candidate in /usr/lib/x86_64-linux-gnu/"$soname" /usr/lib/*/"$soname" /usr/lib/"$soname" \
      /usr/local/lib/"$soname"; do
    if [[ -f "$candidate" ]]; then
      # shellcheck disable=SC2034  # read by the caller
      PRELOAD_PATH="$candidate"
      return 0
    fi
  done
  echo "error: $soname not found; install it (scripts/install-deps.sh) or leave it out of the allocators" >&2
  exit 1
}
