#pragma once
// Names the return addresses that CallSites captured: function, source file and line from the process's own
// ELF objects with elfutils libdw when the build found it, else only what dladdr() knows (module and offset,
// plus exported symbol names). Also decides which frames belong to plimsoll, libtorch or c10 and so are not
// the call site a user wants to see.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace plimsoll::telemetry {

/// One symbolized frame.
struct SiteFrame {
  std::uintptr_t address = 0;        // the return address as captured
  std::string module;                // path of the ELF object holding it; "" when none does
  std::uintptr_t module_offset = 0;  // address - the module's load address
  std::string function;              // demangled; "" when no symbol covers it
  std::string file;                  // source file; "" without debug info
  int line = 0;                      // 0 without debug info
  bool internal = false;             // inside plimsoll, libtorch or c10 (is_internal_frame)
};

/// "function (file:line)"; without debug info "function (module+0xoffset)"; without a symbol
/// "module+0xoffset" (module as its file name); "0x..." when no module holds the address.
std::string format_site_frame(const SiteFrame& frame);

/// Whether a frame belongs to the runtime between the user's code and the allocator: a module named libtorch*
/// or libc10*; a function in namespace plimsoll::, c10::, at:: or torch:: (libtorch's API, inlined into the
/// caller), a plimsoll_* C entry point, or a std:: template running plimsoll code (std::function around a plimsoll
/// lambda); a source file of plimsoll's library (under `plimsoll_source_root`/src/ or /include/plimsoll/). The main
/// job (plimsoll::train::, `plimsoll_source_root`/src/train/) is user code: its frames are not internal.
bool is_internal_frame(const SiteFrame& frame, std::string_view plimsoll_source_root);

/// Symbolizes addresses of this process, each once (results are cached). Not thread-safe.
class CallSiteSymbolizer {
 public:
  CallSiteSymbolizer();
  ~CallSiteSymbolizer();
  CallSiteSymbolizer(const CallSiteSymbolizer&) = delete;
  CallSiteSymbolizer& operator=(const CallSiteSymbolizer&) = delete;

  /// The frame of a return address captured by CallSites, with `internal` set. The reference stays valid as
  /// long as this symbolizer.
  const SiteFrame& resolve(std::uintptr_t return_address);

  /// True when built with libdw: functions are named from full symbol tables and files and lines from DWARF.
  /// False: dladdr() only, so most frames read "module+0xoffset".
  static bool uses_libdw();

 private:
  struct Backend;
  std::unique_ptr<Backend> backend_;
  std::unordered_map<std::uintptr_t, SiteFrame> resolved_;
};

}  // namespace plimsoll::telemetry
