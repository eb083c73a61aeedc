// Python call sites for recordings (plimsoll.enable_python_sites): the innermost Python frame of the allocating
// thread outside installed packages (NumPy's own Python code, torch.nn) names the site, as "file.py:LINE". Read straight from the thread's frame stack, so it neither allocates
// nor needs the GIL: a thread running native code (a torch op that released the GIL) cannot change its own frames.
// The frame layout is CPython 3.11's; other versions get no Python sites (python_sites_supported() says so).
#include "python_sites.hpp"

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "plimsoll/site_source.hpp"

namespace plimsoll::python {
namespace {

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
constexpr bool kSupported = true;

// The head of CPython 3.11's _PyInterpreterFrame (Include/internal/pycore_frame.h), which is internal: only the
// fields read here, in their order.
struct InterpreterFrame311 {
  PyObject* f_func;
  PyObject* f_globals;
  PyObject* f_builtins;
  PyObject* f_locals;
  PyCodeObject* f_code;
  PyObject* frame_obj;
  InterpreterFrame311* previous;
  _Py_CODEUNIT* prev_instr;
  int stacktop;
  bool is_entry;
  char owner;
};
constexpr char kOwnedByGenerator = 1;

const _Py_CODEUNIT* first_instruction(const PyCodeObject* code) {
  return reinterpret_cast<const _Py_CODEUNIT*>(code->co_code_adaptive);
}

// A frame pushed but not started yet (its line would be the function's first): the caller's line is the site.
bool incomplete(const InterpreterFrame311& frame) {
  return frame.owner != kOwnedByGenerator &&
         frame.prev_instr < first_instruction(frame.f_code) + frame.f_code->_co_firsttraceable;
}

// Code of an installed package (NumPy's np.ones is Python code in numpy/core/numeric.py) or of plimsoll's own
// package: not the line a user wants named. Read without allocating; a non-ASCII path counts as the user's.
bool library_code(const PyCodeObject* code) {
  PyObject* name = code->co_filename;
  if (name == nullptr || !PyUnicode_Check(name) || !PyUnicode_IS_COMPACT_ASCII(name)) return false;
  const auto* path = static_cast<const char*>(PyUnicode_DATA(name));
  return std::strstr(path, "-packages/") != nullptr || std::strstr(path, "/plimsoll/_") != nullptr ||
         std::strncmp(path, "<frozen ", 8) == 0;
}

bool innermost_python_frame(InterpreterFrame& out) noexcept {
  PyThreadState* thread = PyGILState_GetThisThreadState();
  if (thread == nullptr || thread->cframe == nullptr) return false;
  auto* innermost = reinterpret_cast<InterpreterFrame311*>(thread->cframe->current_frame);
  while (innermost != nullptr && incomplete(*innermost)) innermost = innermost->previous;
  if (innermost == nullptr) return false;
  // The innermost frame of the user's code; the innermost of all when every frame is a library's.
  InterpreterFrame311* frame = innermost;
  while (frame != nullptr && (incomplete(*frame) || library_code(frame->f_code))) frame = frame->previous;
  if (frame == nullptr) frame = innermost;
  const auto last_instruction = static_cast<int>(frame->prev_instr - first_instruction(frame->f_code));
  out.code = reinterpret_cast<std::uintptr_t>(frame->f_code);
  const int line = PyCode_Addr2Line(frame->f_code, last_instruction * static_cast<int>(sizeof(_Py_CODEUNIT)));
  out.line = line > 0 ? static_cast<std::uint32_t>(line) : 0;
  return true;
}

// The file name as UTF-8 without asking Python to build (and cache) an encoded copy, which would allocate.
std::string utf8_of(PyObject* text) {
  if (text == nullptr || !PyUnicode_Check(text)) return "?";
  if (PyUnicode_IS_COMPACT_ASCII(text)) {
    return std::string(static_cast<const char*>(PyUnicode_DATA(text)), static_cast<std::size_t>(PyUnicode_GET_LENGTH(text)));
  }
  std::string out;
  const int kind = PyUnicode_KIND(text);
  const void* data = PyUnicode_DATA(text);
  for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(text); ++i) {
    const Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c >= 0xD800 && c <= 0xDFFF) {
      out += "\xEF\xBF\xBD";  // a lone surrogate (a file name's undecodable byte): U+FFFD, so the text stays UTF-8
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::string describe_python_frame(const InterpreterFrame& frame) {
  const auto* code = reinterpret_cast<const PyCodeObject*>(frame.code);
  return fmt::format("{}:{}", utf8_of(code->co_filename), frame.line);
}

const InterpreterSiteSource kPythonSource{&innermost_python_frame, &describe_python_frame};
#else
constexpr bool kSupported = false;
#endif

}  // namespace

bool python_sites_supported() noexcept { return kSupported; }

void enable_python_sites(bool on) noexcept {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
  set_interpreter_site_source(on ? &kPythonSource : nullptr);
#else
  (void)on;
#endif
}

}  // namespace plimsoll::python
