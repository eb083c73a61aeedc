// Element types of input tensors: names as people and frameworks write them, and their sizes.
#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"

namespace plimsoll {
namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};

// Canonical names first (to_string uses them), then the aliases documented in estimate.hpp.
constexpr std::array<DTypeName, 8> kNames{{
    {"float32", DType::float32},
    {"float16", DType::float16},
    {"bfloat16", DType::bfloat16},
    {"uint8", DType::uint8},
    {"int64", DType::int64},
    {"fp32", DType::float32},
    {"fp16", DType::float16},
    {"bf16", DType::bfloat16},
}};

// Names are ASCII; the "C" locale's tolower is all that is needed.
bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

}  // namespace

DType parse_dtype(std::string_view name) {
  for (const DTypeName& entry : kNames) {
    if (equals_ignoring_case(entry.name, name)) return entry.dtype;
  }
  throw InvalidArgument(fmt::format("unknown dtype \"{}\": use one of float32 (alias fp32), float16 (fp16), "
                                    "bfloat16 (bf16), uint8, int64",
                                    name));
}

std::string_view to_string(DType dtype) noexcept {
  for (const DTypeName& entry : kNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "unknown";
}

std::uint64_t dtype_bytes(DType dtype) noexcept {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::float16:
    case DType::bfloat16:
      return 2;
    case DType::uint8:
      return 1;
    case DType::int64:
      return 8;
  }
  return 0;
}

}  // namespace plimsoll
