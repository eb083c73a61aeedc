#pragma once
// Call sites from an interpreter that runs above the native stack (the Python module registers one). A recording
// with call sites asks the source first; when it names a frame, that frame is the allocation's call site, so a
// leak report says "train.py:42" rather than a function inside the interpreter.
#include <cstdint>
#include <string>

namespace plimsoll {

/// One interpreter frame, as a key: the code object it runs and the line within it.
struct InterpreterFrame {
  std::uintptr_t code = 0;
  std::uint32_t line = 0;
};

struct InterpreterSiteSource {
  /// The calling thread's innermost interpreter frame; false when the thread runs no interpreted code. Called
  /// on the allocation path under the device's lock: it must not allocate through plimsoll nor block.
  bool (*innermost)(InterpreterFrame& frame) noexcept = nullptr;
  /// The frame's name as a call site ("train.py:42"), asked once per distinct frame, right after innermost()
  /// returned it on the same thread (its code object is alive then).
  std::string (*describe)(const InterpreterFrame& frame) = nullptr;
};

/// Installs `source` for every recording of the process (nullptr removes it). The source must outlive its use:
/// keep it in static storage.
void set_interpreter_site_source(const InterpreterSiteSource* source) noexcept;

}  // namespace plimsoll
