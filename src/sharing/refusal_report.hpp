#pragma once
// The text a refused process prints once on stderr: what was refused and why, who holds the GPU, what to change.
#include <cstdint>
#include <string>

#include "sharing/admission.hpp"
#include "sharing/ledger_snapshot.hpp"

namespace plimsoll::sharing {

struct Refusal {
  std::string call;        // "cuMemAlloc"
  int device = 0;
  std::uint64_t bytes = 0;
  Verdict verdict = Verdict::device_full;
  std::uint64_t headroom = 0;
  int pid = 0;             // the refused process
};

std::string refusal_report(const Refusal& refusal, const LedgerSnapshot& snapshot);

}  // namespace plimsoll::sharing
