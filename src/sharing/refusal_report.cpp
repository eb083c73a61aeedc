#include "sharing/refusal_report.hpp"

#include <fmt/format.h>

#include "plimsoll/size.hpp"

namespace plimsoll::sharing {

namespace {

const char* fix_for(Verdict verdict) {
  switch (verdict) {
    case Verdict::over_cap:
      return "raise this job's cap (PLIMSOLL_SHARE / plimsoll run --device cuda:N=SHARE:CAP) or make it use less";
    case Verdict::shares_reserved:
      return "the rest is promised to other jobs' shares: raise this job's share, or lower theirs";
    case Verdict::needs_trim:
      return "the borrowers were asked to give cached memory back; retry, or lower their caps";
    case Verdict::device_full:
    case Verdict::admitted:
      break;
  }
  return "the GPU is full: end a job above, or lower the shares and caps of the jobs sharing it";
}

}  // namespace

std::string refusal_report(const Refusal& refusal, const LedgerSnapshot& snapshot) {
  std::string text = fmt::format(
      "plimsoll: {} of {} refused on cuda:{} ({}): {}; this process could take {} more.\n", refusal.call,
      format_size(refusal.bytes), refusal.device, snapshot.uuid, describe(refusal.verdict),
      format_size(refusal.headroom));
  text += fmt::format("who holds the GPU (limit {}, {} held, {} promised as shares):\n",
                      format_size(snapshot.limit_bytes), format_size(snapshot.charged), format_size(snapshot.shares));
  text += fmt::format("  {:>8}  {:<16}  {:>11}  {:>11}  {:>11}  {:>11}  {:>11}  {}\n", "pid", "command", "share",
                      "cap", "holds", "context", "borrowed", "gives back");
  for (const ProcessRow& p : snapshot.processes) {
    text += fmt::format("  {:>8}  {:<16}  {:>11}  {:>11}  {:>11}  {:>11}  {:>11}  {}{}\n", p.pid, p.command,
                        format_size(p.share), format_size(p.cap), format_size(p.charged), format_size(p.context),
                        format_size(p.borrowed()), p.can_trim ? "yes" : "no (driver-governed)",
                        p.pid == refusal.pid ? "  <- this process" : (p.running ? "" : "  (dead, reclaimed next)"));
  }
  text += fmt::format("fix: {}.\n(plimsoll prints this once; later refusals return CUDA_ERROR_OUT_OF_MEMORY "
                      "silently. `plimsoll top` shows the GPU live.)\n", fix_for(refusal.verdict));
  return text;
}

}  // namespace plimsoll::sharing
