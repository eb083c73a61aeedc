#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plimsoll/device.hpp"

namespace plimsoll {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

const std::vector<std::string> kFourGpus = {
    "GPU-abc12345-0000-0000-0000-000000000000",
    "GPU-abd67890-0000-0000-0000-000000000001",
    "GPU-12345678-0000-0000-0000-000000000002",
    "GPU-ffeeddcc-0000-0000-0000-000000000003",
};
const std::vector<std::string> kTwoGpus = {kFourGpus[0], kFourGpus[1]};

std::vector<int> selected(std::optional<std::string_view> value, const std::vector<std::string>& uuids = kFourGpus) {
  return resolve_visibility(value, uuids).selected;
}

TEST(Visibility, UnsetUsesEveryDevice) {
  const Visibility visibility = resolve_visibility(std::nullopt, kFourGpus);
  EXPECT_FALSE(visibility.set);
  EXPECT_THAT(visibility.selected, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(visibility.entries, IsEmpty());
  EXPECT_EQ(visibility.summary(), "not set: every GPU is used (0, 1, 2 and 3)");
}

TEST(Visibility, UnsetWithNoDevices) {
  const Visibility visibility = resolve_visibility(std::nullopt, {});
  EXPECT_THAT(visibility.selected, IsEmpty());
  EXPECT_EQ(visibility.summary(), "not set: every GPU is used (none found)");
}

TEST(Visibility, EmptyStringHidesEveryDevice) {
  const Visibility visibility = resolve_visibility("", kFourGpus);
  EXPECT_TRUE(visibility.set);
  EXPECT_THAT(visibility.selected, IsEmpty());
  EXPECT_THAT(visibility.entries, IsEmpty());
  EXPECT_EQ(visibility.summary(), "uses no GPU (the list is empty)");
}

TEST(Visibility, IndicesInTheOrderGiven) {
  EXPECT_THAT(selected("1,0"), ElementsAre(1, 0));
  EXPECT_THAT(selected("3"), ElementsAre(3));
  EXPECT_THAT(selected("2,3,0,1"), ElementsAre(2, 3, 0, 1));
  EXPECT_THAT(selected("0"), ElementsAre(0));
}

TEST(Visibility, MinusOneStopsTheList) {
  const Visibility visibility = resolve_visibility("0,2,-1,1", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(0, 2));
  ASSERT_EQ(visibility.entries.size(), 4u);
  EXPECT_EQ(visibility.entries[0].text, "0");
  EXPECT_TRUE(visibility.entries[0].used);
  EXPECT_EQ(visibility.entries[0].why, "GPU 0");
  EXPECT_TRUE(visibility.entries[1].used);
  EXPECT_EQ(visibility.entries[1].why, "GPU 2");
  EXPECT_EQ(visibility.entries[2].text, "-1");
  EXPECT_FALSE(visibility.entries[2].used);
  EXPECT_EQ(visibility.entries[2].why, "stops the list: a negative index ends the list");
  EXPECT_EQ(visibility.entries[3].text, "1");
  EXPECT_FALSE(visibility.entries[3].used);
  EXPECT_EQ(visibility.entries[3].why, "ignored: after the list stopped");
  EXPECT_EQ(visibility.summary(),
            "uses GPUs 0 and 2; the list stops at \"-1\" (a negative index ends the list); 1 later entry is ignored");
}

TEST(Visibility, LeadingMinusOneSelectsNothing) {
  const Visibility visibility = resolve_visibility("-1,0", kFourGpus);
  EXPECT_THAT(visibility.selected, IsEmpty());
  ASSERT_EQ(visibility.entries.size(), 2u);
  EXPECT_THAT(visibility.entries[0].why, StartsWith("stops the list: "));
  EXPECT_EQ(visibility.entries[1].why, "ignored: after the list stopped");
  EXPECT_THAT(visibility.summary(), StartsWith("uses no GPU; the list stops at \"-1\""));
}

TEST(Visibility, OtherNegativeIndicesStopTheListToo) {
  EXPECT_THAT(selected("1,-2,0"), ElementsAre(1));
  EXPECT_THAT(selected("-0,1"), IsEmpty());
}

TEST(Visibility, OutOfRangeIndexStopsTheList) {
  const Visibility visibility = resolve_visibility("7", kTwoGpus);
  EXPECT_THAT(visibility.selected, IsEmpty());
  ASSERT_EQ(visibility.entries.size(), 1u);
  EXPECT_EQ(visibility.entries[0].why, "stops the list: no GPU 7 (there are only GPUs 0 to 1)");
  EXPECT_EQ(visibility.summary(), "uses no GPU; the list stops at \"7\" (no GPU 7 (there are only GPUs 0 to 1))");

  EXPECT_THAT(selected("0,4,1"), ElementsAre(0));  // 4 GPUs: 0..3
  EXPECT_THAT(selected("1,2", kTwoGpus), ElementsAre(1));
  EXPECT_THAT(selected("0,99999999999999999999999,1"), ElementsAre(0));
  EXPECT_THAT(resolve_visibility("1", {kFourGpus[0]}).entries[0].why, HasSubstr("there is only GPU 0"));
  EXPECT_THAT(resolve_visibility("0", {}).entries[0].why, HasSubstr("there are no GPUs"));
}

TEST(Visibility, RepeatedDeviceStopsTheList) {
  const Visibility visibility = resolve_visibility("0,0,1", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(0));
  ASSERT_EQ(visibility.entries.size(), 3u);
  EXPECT_EQ(visibility.entries[1].why, "stops the list: GPU 0 is already listed");
  EXPECT_EQ(visibility.entries[2].why, "ignored: after the list stopped");
  // The same device named once by index and once by UUID is a repeat too.
  EXPECT_THAT(selected("2,GPU-1234,3"), ElementsAre(2));
}

TEST(Visibility, EntriesAreTrimmedOfBlanks) {
  const Visibility visibility = resolve_visibility(" 1 ,\t0 ", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(1, 0));
  ASSERT_EQ(visibility.entries.size(), 2u);
  EXPECT_EQ(visibility.entries[0].text, "1");
  EXPECT_EQ(visibility.entries[1].text, "0");
}

TEST(Visibility, UnparsableOrEmptyEntryStopsTheList) {
  EXPECT_THAT(selected("0,,1"), ElementsAre(0));
  EXPECT_THAT(selected("0, ,1"), ElementsAre(0));
  EXPECT_THAT(selected("1,x,0"), ElementsAre(1));
  EXPECT_THAT(selected("0,1 2,3"), ElementsAre(0));
  EXPECT_THAT(selected("0,"), ElementsAre(0));
  EXPECT_THAT(selected(","), IsEmpty());
  EXPECT_THAT(selected(" "), IsEmpty());
  const Visibility visibility = resolve_visibility("0,x", kFourGpus);
  ASSERT_EQ(visibility.entries.size(), 2u);
  EXPECT_EQ(visibility.entries[1].why,
            "stops the list: \"x\" is neither a GPU index nor the start of a GPU UUID");
}

TEST(Visibility, UuidPrefixSelectsTheOneMatchingDevice) {
  EXPECT_THAT(selected("GPU-abc"), ElementsAre(0));
  EXPECT_THAT(selected("GPU-abd6"), ElementsAre(1));
  EXPECT_THAT(selected("GPU-ffeeddcc-0000-0000-0000-000000000003"), ElementsAre(3));
  EXPECT_THAT(selected("GPU-ffeeddcc,GPU-abc,1"), ElementsAre(3, 0, 1));
  const Visibility visibility = resolve_visibility("GPU-abc", kFourGpus);
  ASSERT_EQ(visibility.entries.size(), 1u);
  EXPECT_TRUE(visibility.entries[0].used);
  EXPECT_EQ(visibility.entries[0].why, "GPU 0");
}

TEST(Visibility, UuidWithoutItsGpuTagMatchesToo) {
  EXPECT_THAT(selected("abd"), ElementsAre(1));
  EXPECT_THAT(selected("ffeeddcc-0000,0"), ElementsAre(3, 0));
  // All digits reads as an index, never as a UUID prefix.
  EXPECT_THAT(selected("12345678"), IsEmpty());
}

TEST(Visibility, AmbiguousUuidPrefixStopsTheList) {
  const Visibility visibility = resolve_visibility("2,GPU-ab,0", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(2));
  ASSERT_EQ(visibility.entries.size(), 3u);
  EXPECT_EQ(visibility.entries[1].why,
            "stops the list: \"GPU-ab\" matches 2 GPUs (0 and 1); give more of the UUID");
  EXPECT_THAT(selected("GPU-"), IsEmpty());
  EXPECT_THAT(selected("GPU-", {kFourGpus[2]}), ElementsAre(0));
}

TEST(Visibility, UnknownUuidStopsTheList) {
  const Visibility visibility = resolve_visibility("1,GPU-0000,0", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(1));
  EXPECT_EQ(visibility.entries[1].why, "stops the list: no GPU has a UUID starting with \"GPU-0000\"");
  EXPECT_THAT(selected("gpu-abc"), IsEmpty());  // the tag is case-sensitive, as in CUDA
}

TEST(Visibility, MigInstancesMatchTheirOwnUuids) {
  const std::vector<std::string> uuids = {"GPU-abc12345-0000-0000-0000-000000000000",
                                          "MIG-11112222-3333-4444-5555-666677778888",
                                          "MIG-99990000-3333-4444-5555-666677778888"};
  EXPECT_THAT(selected("MIG-1111", uuids), ElementsAre(1));
  EXPECT_THAT(selected("MIG-9999,MIG-1111,0", uuids), ElementsAre(2, 1, 0));
  const Visibility missing = resolve_visibility("MIG-4242,0", uuids);
  EXPECT_THAT(missing.selected, IsEmpty());
  EXPECT_EQ(missing.entries[0].why, "stops the list: no MIG instance has a UUID starting with \"MIG-4242\"");
  EXPECT_THAT(selected("MIG-", uuids), IsEmpty());  // ambiguous
  EXPECT_THAT(selected("MIG-abc12345", uuids), IsEmpty());  // a GPU's UUID under the MIG tag names nothing
}

TEST(Visibility, SummaryCountsIgnoredEntries) {
  EXPECT_EQ(resolve_visibility("1", kFourGpus).summary(), "uses GPU 1");
  EXPECT_EQ(resolve_visibility("3,1,2", kFourGpus).summary(), "uses GPUs 3, 1 and 2");
  EXPECT_THAT(resolve_visibility("0,9,1,2", kFourGpus).summary(),
              HasSubstr("the list stops at \"9\" (no GPU 9 (there are only GPUs 0 to 3)); 2 later entries are ignored"));
  EXPECT_THAT(resolve_visibility("0,9", kFourGpus).summary(), Not(HasSubstr("later")));
}

TEST(Visibility, EveryEntryIsExplained) {
  const Visibility visibility = resolve_visibility("3,GPU-abc, 1 ,junk,0,2", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(3, 0, 1));
  ASSERT_EQ(visibility.entries.size(), 6u);
  std::vector<std::string> whys;
  for (const auto& entry : visibility.entries) whys.push_back(entry.why);
  EXPECT_THAT(whys, ElementsAre("GPU 3", "GPU 0", "GPU 1", StartsWith("stops the list: "),
                                "ignored: after the list stopped", "ignored: after the list stopped"));
}

}  // namespace
}  // namespace plimsoll
