#include "telemetry/recording/call_site_symbolizer.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#ifdef PLIMSOLL_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

// Set by src/telemetry/CMakeLists.txt: the source files of plimsoll's own library lie under it.
#ifndef PLIMSOLL_SOURCE_ROOT
#define PLIMSOLL_SOURCE_ROOT ""
#endif

namespace plimsoll::telemetry {
namespace {

std::string_view file_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A demangled function's qualified name, without return type and parameters:
// "void plimsoll::f<int>(int)" -> "plimsoll::f<int>". Spaces and parentheses inside template arguments
// ("std::function<void (int)>") belong to the name.
std::string_view qualified_name(std::string_view function) {
  int template_depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < function.size(); ++i) {
    const char c = function[i];
    if (c == '<') {
      ++template_depth;
    } else if (c == '>' && template_depth > 0) {
      --template_depth;
    } else if (template_depth == 0 && c == ' ') {
      start = i + 1;
    } else if (template_depth == 0 && c == '(') {
      return function.substr(start, i - start);
    }
  }
  return function.substr(start);
}

// The demangled name, without the " [clone .constprop.0]" suffixes of compiler-made copies: a user knows the
// function by its source name.
std::string demangle(const char* symbol) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                                              &std::free);
  std::string name = status == 0 && demangled ? std::string(demangled.get()) : std::string(symbol);
  if (const std::size_t clone = name.find(" [clone "); clone != std::string::npos) name.erase(clone);
  return name;
}

// A return address points after its call instruction, which may be the first byte of the next function or
// line: look up the byte before it.
std::uintptr_t call_address(std::uintptr_t return_address) { return return_address - 1; }

// What the dynamic loader knows: the module, and a name only for symbols in its dynamic symbol table.
void resolve_with_loader(SiteFrame& frame) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(call_address(frame.address)), &info) == 0) return;
  if (info.dli_fname != nullptr) frame.module = info.dli_fname;
  frame.module_offset = frame.address - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  if (info.dli_sname != nullptr) frame.function = demangle(info.dli_sname);
}

#ifdef PLIMSOLL_HAVE_LIBDW
// Changes whenever a shared object is loaded or unloaded (dlopen after the modules were last listed).
std::uint64_t loader_generation() {
  std::uint64_t generation = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        *static_cast<std::uint64_t*>(out) = info->dlpi_adds + info->dlpi_subs;
        return 1;  // the counters are the same in every entry: the first is enough
      },
      &generation);
  return generation;
}
#endif

}  // namespace

#ifdef PLIMSOLL_HAVE_LIBDW
// libdwfl over this process's own mappings (/proc/self/maps). Separate debug info is looked up the standard
// way (build-id under /usr/lib/debug, .gnu_debuglink, and debuginfod when DEBUGINFOD_URLS says so, as gdb does).
struct CallSiteSymbolizer::Backend {
  Backend() {
    callbacks.find_elf = dwfl_linux_proc_find_elf;
    callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    dwfl = dwfl_begin(&callbacks);
  }
  ~Backend() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  void resolve(SiteFrame& frame) {
    Dwfl_Module* module = module_of(call_address(frame.address));
    if (module == nullptr) {
      resolve_with_loader(frame);
      return;
    }
    Dwarf_Addr start = 0;
    const char* module_name = dwfl_module_info(module, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (module_name != nullptr) frame.module = module_name;
    frame.module_offset = frame.address - start;
    if (const char* symbol = dwfl_module_addrname(module, call_address(frame.address))) frame.function = demangle(symbol);
    if (Dwfl_Line* line = dwfl_module_getsrc(module, call_address(frame.address))) {
      int line_number = 0;
      if (const char* file = dwfl_lineinfo(line, nullptr, &line_number, nullptr, nullptr, nullptr)) {
        frame.file = file;
        frame.line = line_number;
      }
    }
  }

 private:
  Dwfl_Module* module_of(Dwarf_Addr address) {
    if (dwfl == nullptr) return nullptr;
    report_modules();
    return dwfl_addrmodule(dwfl, address);
  }

  // Lists the loaded modules again when the loader's set changed since the last time (or it never worked).
  void report_modules() {
    const std::uint64_t generation = loader_generation();
    if (reported && generation == reported_generation) return;
    dwfl_report_begin(dwfl);
    const int failed = dwfl_linux_proc_report(dwfl, getpid());
    dwfl_report_end(dwfl, nullptr, nullptr);
    reported = failed == 0;
    reported_generation = generation;
  }

  Dwfl_Callbacks callbacks{};  // dwfl keeps a pointer to it
  Dwfl* dwfl = nullptr;
  bool reported = false;
  std::uint64_t reported_generation = 0;
};

bool CallSiteSymbolizer::uses_libdw() { return true; }
#else
struct CallSiteSymbolizer::Backend {
  void resolve(SiteFrame& frame) { resolve_with_loader(frame); }
};

bool CallSiteSymbolizer::uses_libdw() { return false; }
#endif

CallSiteSymbolizer::CallSiteSymbolizer() : backend_(std::make_unique<Backend>()) {}

CallSiteSymbolizer::~CallSiteSymbolizer() = default;

const SiteFrame& CallSiteSymbolizer::resolve(std::uintptr_t return_address) {
  const auto [entry, added] = resolved_.try_emplace(return_address);
  SiteFrame& frame = entry->second;
  if (added) {
    frame.address = return_address;
    backend_->resolve(frame);
    frame.internal = is_internal_frame(frame, PLIMSOLL_SOURCE_ROOT);
  }
  return frame;
}

std::string format_site_frame(const SiteFrame& frame) {
  const std::string where = frame.module.empty()
                                ? fmt::format("{:#x}", frame.address)
                                : fmt::format("{}+{:#x}", file_name(frame.module), frame.module_offset);
  if (frame.function.empty()) return where;
  if (!frame.file.empty()) return fmt::format("{} ({}:{})", frame.function, frame.file, frame.line);
  return fmt::format("{} ({})", frame.function, where);
}

bool is_internal_frame(const SiteFrame& frame, std::string_view plimsoll_source_root) {
  const std::string_view module = file_name(frame.module);
  if (module.starts_with("libtorch") || module.starts_with("libc10")) return true;

  const std::string_view name = qualified_name(frame.function);
  // The main job (plimsoll::train, src/train) is a program running on plimsoll, not plimsoll's machinery: its
  // frames are the call sites the user of `plimsoll train` wants named.
  if (name.starts_with("plimsoll::train::")) return false;
  if (name.starts_with("plimsoll::") || name.starts_with("c10::") || name.starts_with("plimsoll_")) return true;
  // libtorch's C++ API is inlined into the caller's binary (at::Tensor::clone, torch::empty): the call site is the
  // caller's code, not the header's.
  if (name.starts_with("at::") || name.starts_with("torch::")) return true;
  // std::function, std::invoke and the like calling back into plimsoll are plimsoll's machinery too.
  if (name.starts_with("std::") && name.find("plimsoll::") != std::string_view::npos) return true;

  if (plimsoll_source_root.empty() || frame.file.empty()) return false;
  const std::string_view file = frame.file;
  if (file.starts_with(plimsoll_source_root) && file.substr(plimsoll_source_root.size()).starts_with("/src/train/")) {
    return false;
  }
  for (const std::string_view library_folder : {"/src/", "/include/plimsoll/"}) {
    if (file.size() > plimsoll_source_root.size() + library_folder.size() && file.starts_with(plimsoll_source_root) &&
        file.substr(plimsoll_source_root.size()).starts_with(library_folder)) {
      return true;
    }
  }
  return false;
}

}  // namespace plimsoll::telemetry
