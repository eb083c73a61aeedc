#pragma once
// GpuShare's inside, for the adaptors in this folder and for tests.
#include <memory>

#include "plimsoll/sharing.hpp"
#include "sharing/ledger.hpp"

namespace plimsoll {

struct GpuShare::Impl {
  sharing::Ledger ledger;
  int slot = -1;
  std::uint64_t share = 0;
  std::uint64_t cap = 0;
};

}  // namespace plimsoll
