// The admission rule (src/sharing/admission.hpp) as a pure function: caps, the limit, guaranteed shares, and who
// may borrow what.
#include <gtest/gtest.h>

#include "sharing/admission.hpp"
#include "sharing/process_identity.hpp"

namespace plimsoll::sharing {
namespace {

// A GPU of 100 units: `self` plus others summarized in the totals.
LedgerTotals totals_with(const Holder& self, std::uint64_t others_charged, std::uint64_t others_committed,
                         std::uint64_t trimmable_borrowed = 0) {
  return LedgerTotals{.limit = 100, .charged = self.charged + others_charged,
                      .committed = committed_by(self) + others_committed, .trimmable_borrowed = trimmable_borrowed};
}

TEST(Admission, WithinShareAndRoomIsAdmitted) {
  const Holder self{.share = 40, .cap = 60, .charged = 10, .can_trim = false};
  EXPECT_EQ(decide(totals_with(self, 20, 40), self, 30), Verdict::admitted);
}

TEST(Admission, NobodyPassesItsCap) {
  const Holder self{.share = 40, .cap = 60, .charged = 50, .can_trim = true};
  EXPECT_EQ(decide(totals_with(self, 0, 0), self, 11), Verdict::over_cap);
  EXPECT_EQ(headroom(totals_with(self, 0, 0), self), 10u);
}

TEST(Admission, TogetherNobodyPassesTheLimit) {
  const Holder self{.share = 50, .cap = 100, .charged = 10, .can_trim = true};
  EXPECT_EQ(decide(totals_with(self, 85, 85), self, 6), Verdict::device_full);
  EXPECT_EQ(decide(totals_with(self, 85, 85), self, 5), Verdict::admitted);
}

TEST(Admission, DriverGovernedProcessBorrowsOnlyUnsharedMemory) {
  // Another process has a share of 50 and uses 10 of it: 40 are promised to it, free but not lendable.
  const Holder self{.share = 30, .cap = 100, .charged = 30, .can_trim = false};
  EXPECT_EQ(headroom(totals_with(self, 10, 50), self), 20u);  // 100 - 50 promised - 30 held
  EXPECT_EQ(decide(totals_with(self, 10, 50), self, 21), Verdict::shares_reserved);
  EXPECT_EQ(decide(totals_with(self, 10, 50), self, 20), Verdict::admitted);
}

TEST(Admission, EngineProcessBorrowsOthersUnusedShares) {
  const Holder self{.share = 30, .cap = 100, .charged = 30, .can_trim = true};
  EXPECT_EQ(headroom(totals_with(self, 10, 50), self), 60u);  // all that is free
}

TEST(Admission, UnderItsShareRefusedBecauseOfBorrowersAsksThemToTrim) {
  // self: share 50, holds 10. The other (can trim): share 30, holds 85, i.e. borrowed 55.
  const Holder self{.share = 50, .cap = 50, .charged = 10, .can_trim = false};
  EXPECT_EQ(decide(totals_with(self, 85, 85, 55), self, 20), Verdict::needs_trim);
  // Without a borrower that can trim, the same refusal is a full GPU.
  EXPECT_EQ(decide(totals_with(self, 85, 85, 0), self, 20), Verdict::device_full);
}

TEST(Admission, VerdictsHaveSentences) {
  for (Verdict verdict : {Verdict::admitted, Verdict::over_cap, Verdict::device_full, Verdict::shares_reserved,
                          Verdict::needs_trim})
    EXPECT_STRNE(describe(verdict), "?");
}

TEST(ProcStat, ReadsStartTimeAndStatePastAParenthesizedCommand) {
  const std::string text =
      "1234 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21\n";
  const auto stat = parse_proc_stat(text);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->start_time, 424242u);
  EXPECT_FALSE(stat->exited);
  const auto zombie = parse_proc_stat("1 (x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 5 19");
  ASSERT_TRUE(zombie.has_value());
  EXPECT_TRUE(zombie->exited);
  EXPECT_FALSE(parse_proc_stat("garbage").has_value());
  EXPECT_FALSE(parse_proc_stat("1 (x) S 1 2").has_value());
}

TEST(ProcStat, ThisProcessIsRunningAndAnotherStartTimeIsNot) {
  const ProcessIdentity me = this_process();
  EXPECT_TRUE(is_running(me));
  EXPECT_FALSE(is_running(ProcessIdentity{.pid = me.pid, .start_time = me.start_time + 1})) << "a reused pid";
  EXPECT_FALSE(is_running(ProcessIdentity{.pid = 0, .start_time = 0}));
}

}  // namespace
}  // namespace plimsoll::sharing
