// CUDA_VISIBLE_DEVICES grammar. Cases marked "measured" were checked against the CUDA driver itself
// (driver 580, one H100): the count CUDA showed with that value set is the size of the selection asserted here.
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
const std::vector<std::string> kOneGpu = {"GPU-ec3dc7b5-5207-4e9a-d4ea-0fe31874f0e0"};  // the measured H100

std::vector<int> selected(std::optional<std::string_view> value, const std::vector<std::string>& uuids = kFourGpus) {
  return resolve_visibility(value, uuids).selected;
}

std::vector<std::string> whys(std::string_view value, const std::vector<std::string>& uuids = kFourGpus) {
  std::vector<std::string> result;
  for (const auto& entry : resolve_visibility(value, uuids).entries) result.push_back(entry.why);
  return result;
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

TEST(Visibility, EmptyStringHidesEveryDevice) {  // measured
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
  EXPECT_THAT(selected("0", kOneGpu), ElementsAre(0));  // measured
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
  EXPECT_THAT(selected("0,-1", kOneGpu), ElementsAre(0));  // measured
}

TEST(Visibility, LeadingMinusOneSelectsNothing) {
  const Visibility visibility = resolve_visibility("-1,0", kFourGpus);
  EXPECT_THAT(visibility.selected, IsEmpty());
  EXPECT_THAT(whys("-1,0"), ElementsAre(StartsWith("stops the list: "), "ignored: after the list stopped"));
  EXPECT_THAT(visibility.summary(), StartsWith("uses no GPU; the list stops at \"-1\""));
  EXPECT_THAT(selected("-1", kOneGpu), IsEmpty());  // measured
}

TEST(Visibility, OtherNegativeIndicesStopTheListToo) {
  EXPECT_THAT(selected("1,-2,0"), ElementsAre(1));
  EXPECT_THAT(selected("-2,0", kOneGpu), IsEmpty());  // measured
}

TEST(Visibility, OutOfRangeIndexStopsTheList) {
  const Visibility visibility = resolve_visibility("7", kTwoGpus);
  EXPECT_THAT(visibility.selected, IsEmpty());
  ASSERT_EQ(visibility.entries.size(), 1u);
  EXPECT_EQ(visibility.entries[0].why, "stops the list: no GPU 7 (there are only GPUs 0 to 1)");
  EXPECT_EQ(visibility.summary(), "uses no GPU; the list stops at \"7\" (no GPU 7 (there are only GPUs 0 to 1))");

  EXPECT_THAT(selected("0,4,1"), ElementsAre(0));
  EXPECT_THAT(selected("1,2", kTwoGpus), ElementsAre(1));
  EXPECT_THAT(selected("1,0", kOneGpu), IsEmpty());    // measured
  EXPECT_THAT(selected("0,1,0", kOneGpu), ElementsAre(0));  // measured: stops at 1 before the repeat
  EXPECT_THAT(whys("1", kOneGpu), ElementsAre(HasSubstr("there is only GPU 0")));
  EXPECT_THAT(whys("0", {}), ElementsAre(HasSubstr("there are no GPUs")));
}

TEST(Visibility, IndicesAreReadLikeStrtoul) {  // all measured
  EXPECT_THAT(selected(" 0", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("\t0", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0 ", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("00", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("+0", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("-0", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("-00", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0junk", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0x1", kOneGpu), ElementsAre(0));  // decimal: the x ends the number
  EXPECT_THAT(selected("0.5", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0 1", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0/1", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("01", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("1 0", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("1.0", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("1gpu2,2ampere"), ElementsAre(1, 2));
}

TEST(Visibility, OnlyTheLow32BitsOfAnIndexCount) {  // all measured
  EXPECT_THAT(selected("4294967296", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("-4294967296", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("4294967295", kOneGpu), IsEmpty());   // -1
  EXPECT_THAT(selected("2147483648", kOneGpu), IsEmpty());   // INT_MIN
  EXPECT_THAT(selected("2147483647", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("18446744073709551616", kOneGpu), IsEmpty());  // saturates to all ones: -1
  EXPECT_THAT(selected("0,4294967296", kOneGpu), IsEmpty());  // 0 twice
  EXPECT_THAT(whys("4294967297"), ElementsAre("GPU 1 (CUDA reads \"4294967297\" as 1)"));
  EXPECT_THAT(whys("4294967295"),
              ElementsAre("stops the list: CUDA reads \"4294967295\" as -1, and a negative index ends the list"));
}

TEST(Visibility, ExplainsIndicesCudaReadsLoosely) {
  EXPECT_THAT(whys("1gpu,0"), ElementsAre("GPU 1 (CUDA reads \"1gpu\" as 1)", "GPU 0"));
  EXPECT_THAT(whys(" 2 "), ElementsAre("GPU 2"));  // blanks alone need no note
  EXPECT_THAT(whys("9x"), ElementsAre("stops the list: no GPU 9 (CUDA reads \"9x\" as 9; there are only GPUs 0 to 3)"));
}

TEST(Visibility, EntriesWithoutDigitsStopAnIndexList) {
  EXPECT_THAT(selected("0,,1"), ElementsAre(0));
  EXPECT_THAT(selected("0,,0", kOneGpu), ElementsAre(0));  // measured
  EXPECT_THAT(selected(",0", kOneGpu), IsEmpty());          // measured
  EXPECT_THAT(selected(",", kOneGpu), IsEmpty());           // measured
  EXPECT_THAT(selected(" ", kOneGpu), IsEmpty());           // measured
  EXPECT_THAT(selected("0,", kOneGpu), ElementsAre(0));     // measured
  EXPECT_THAT(selected("x,0", kOneGpu), IsEmpty());         // measured
  EXPECT_THAT(selected("0,x,0", kOneGpu), ElementsAre(0));  // measured
  EXPECT_THAT(selected("1,+,0"), ElementsAre(1));
  EXPECT_THAT(whys("0,x"), ElementsAre("GPU 0", "stops the list: \"x\" is not a GPU index"));
}

TEST(Visibility, RepeatingADeviceEmptiesTheWholeList) {  // measured: CUDA shows no GPU at all
  EXPECT_THAT(selected("0,0", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("0,0,1", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("0, 0", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("-0,0", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("+0,0", kOneGpu), IsEmpty());

  const Visibility visibility = resolve_visibility("2,0,2,1", kFourGpus);
  EXPECT_THAT(visibility.selected, IsEmpty());
  ASSERT_EQ(visibility.entries.size(), 4u);
  EXPECT_FALSE(visibility.entries[0].used);
  EXPECT_EQ(visibility.entries[0].why, "GPU 2, dropped: a later entry repeats a GPU");
  EXPECT_EQ(visibility.entries[1].why, "GPU 0, dropped: a later entry repeats a GPU");
  EXPECT_EQ(visibility.entries[2].why,
            "stops the list: GPU 2 is named twice, and a repeated GPU makes CUDA show no GPU at all");
  EXPECT_EQ(visibility.entries[3].why, "ignored: after the list stopped");
  EXPECT_EQ(visibility.summary(),
            "uses no GPU; the list stops at \"2\" (GPU 2 is named twice, and a repeated GPU makes CUDA show no GPU "
            "at all); 1 later entry is ignored");
}

TEST(Visibility, UuidPrefixSelectsTheOneMatchingDevice) {
  EXPECT_THAT(selected("GPU-abc"), ElementsAre(0));
  EXPECT_THAT(selected("GPU-abd6"), ElementsAre(1));
  EXPECT_THAT(selected("GPU-ffeeddcc-0000-0000-0000-000000000003"), ElementsAre(3));
  EXPECT_THAT(selected("GPU-ffeeddcc,GPU-abc,GPU-1"), ElementsAre(3, 0, 2));
  EXPECT_THAT(whys("GPU-abc"), ElementsAre("GPU 0"));
  EXPECT_THAT(selected("GPU-ec3d", kOneGpu), ElementsAre(0));  // measured
  EXPECT_THAT(selected("GPU-e", kOneGpu), ElementsAre(0));     // measured
}

TEST(Visibility, UuidDigitsIgnoreCaseAndDashes) {  // all measured
  EXPECT_THAT(selected("GPU-EC3DC7B5", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3dc7b552074e9a", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU--ec3d", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec-3d", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3d-", kOneGpu), ElementsAre(0));
}

TEST(Visibility, TextAfterAWholeUuidIsIgnored) {  // all measured
  EXPECT_THAT(selected("GPU-ec3dc7b5-5207-4e9a-d4ea-0fe31874f0e0X", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3dc7b5-5207-4e9a-d4ea-0fe31874f0e0-extra", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3dc7b552074e9ad4ea0fe31874f0e0ZZZ", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3dc7b5-5207-4e9a-d4ea-0fe3187", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3dc7b5-5207-4e9a-d4ea-0fe3187Z", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("GPU-ec3dc7b5-5207-4e9a-d4ea-0fe31874f0e1", kOneGpu), IsEmpty());
}

TEST(Visibility, MalformedUuidsStopTheList) {  // all measured
  for (const char* value : {"GPU-", "MIG-", "GPU-xyz", "GPU-eZ", "GPU-ec3d ", "GPU- ec3d", "GPU-ec3d:0", "GPU-ec3d/1",
                            "GPU-e\t", "MIG-GPU-ec3d", "GPU-f", "gpu-ec3d", "Gpu-ec3d", " GPU-ec3d", "ec3dc7b5",
                            "ec"}) {
    EXPECT_THAT(selected(value, kOneGpu), IsEmpty()) << value;
  }
  EXPECT_THAT(whys("GPU-ec3d ", kOneGpu),
              ElementsAre("stops the list: \"GPU-ec3d \" is not a UUID: only hex digits and dashes may follow "
                          "\"GPU-\""));
  EXPECT_THAT(whys("GPU-", kOneGpu), ElementsAre("stops the list: \"GPU-\" gives no UUID digits"));
  EXPECT_THAT(whys("GPU-f", kOneGpu), ElementsAre("stops the list: no GPU has a UUID starting with \"GPU-f\""));
  // No tag, no UUID: a bare prefix reads as an index, and has no digits.
  EXPECT_THAT(whys("ec3d", kOneGpu), ElementsAre("stops the list: \"ec3d\" is not a GPU index"));
}

TEST(Visibility, TheFirstEntryPicksTheKindOfTheList) {  // all measured
  EXPECT_THAT(selected("GPU-ec3d,x", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-ec3d,0,0", kOneGpu), ElementsAre(0));     // the index ends a UUID list
  EXPECT_THAT(selected("0,GPU-ec3d,0", kOneGpu), ElementsAre(0));     // the UUID ends an index list
  EXPECT_THAT(selected("GPU-ec3d,1", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("0,GPU-f", kOneGpu), ElementsAre(0));
  EXPECT_THAT(selected("GPU-abc,3"), ElementsAre(0));
  EXPECT_THAT(selected("3,GPU-abc"), ElementsAre(3));
  EXPECT_THAT(whys("GPU-abc,3"),
              ElementsAre("GPU 0", "stops the list: an index in a list of UUIDs ends it (the first entry sets the "
                                   "kind of the whole list)"));
  EXPECT_THAT(whys("3,GPU-abc"),
              ElementsAre("GPU 3", "stops the list: a UUID in a list of indices ends it (the first entry sets the "
                                   "kind of the whole list)"));
  EXPECT_THAT(whys("GPU-abc,zz"),
              ElementsAre("GPU 0", "stops the list: \"zz\" is not a UUID starting with GPU- or MIG-"));
}

TEST(Visibility, RepeatingADeviceByUuidEmptiesTheListToo) {  // all measured
  EXPECT_THAT(selected("GPU-ec3d,GPU-ec3d", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("GPU-ec3d,GPU-e", kOneGpu), IsEmpty());  // different text, same GPU
  EXPECT_THAT(selected("MIG-ec3d,GPU-ec3d", kOneGpu), IsEmpty());
  EXPECT_THAT(selected("GPU-abc,GPU-1234,GPU-ABC12"), IsEmpty());
}

TEST(Visibility, AmbiguousUuidPrefixStopsTheList) {
  const Visibility visibility = resolve_visibility("GPU-1,GPU-ab,GPU-f", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(2));
  EXPECT_THAT(whys("GPU-1,GPU-ab,GPU-f"),
              ElementsAre("GPU 2", "stops the list: \"GPU-ab\" matches GPUs 0 and 1; give more of the UUID",
                          "ignored: after the list stopped"));
}

TEST(Visibility, MigTagMatchesLikeAGpuTag) {
  EXPECT_THAT(selected("MIG-ec3dc7b5", kOneGpu), ElementsAre(0));  // measured, on a GPU without MIG
  EXPECT_THAT(selected("MIG-e", kOneGpu), ElementsAre(0));         // measured
  const std::vector<std::string> uuids = {"GPU-abc12345-0000-0000-0000-000000000000",
                                          "MIG-11112222-3333-4444-5555-666677778888",
                                          "MIG-99990000-3333-4444-5555-666677778888"};
  EXPECT_THAT(selected("MIG-1111", uuids), ElementsAre(1));
  EXPECT_THAT(selected("MIG-9999,MIG-1111,GPU-abc", uuids), ElementsAre(2, 1, 0));
  EXPECT_THAT(selected("MIG-4242,MIG-1111", uuids), IsEmpty());
}

TEST(Visibility, SummaryCountsIgnoredEntries) {
  EXPECT_EQ(resolve_visibility("1", kFourGpus).summary(), "uses GPU 1");
  EXPECT_EQ(resolve_visibility("3,1,2", kFourGpus).summary(), "uses GPUs 3, 1 and 2");
  EXPECT_THAT(resolve_visibility("0,9,1,2", kFourGpus).summary(),
              HasSubstr("the list stops at \"9\" (no GPU 9 (there are only GPUs 0 to 3)); 2 later entries are "
                        "ignored"));
  EXPECT_THAT(resolve_visibility("0,9", kFourGpus).summary(), Not(HasSubstr("later")));
}

TEST(Visibility, EveryEntryIsExplained) {
  EXPECT_THAT(whys("3, 1 ,junk,0,2"),
              ElementsAre("GPU 3", "GPU 1", "stops the list: \"junk\" is not a GPU index",
                          "ignored: after the list stopped", "ignored: after the list stopped"));
  const Visibility visibility = resolve_visibility("3, 1 ,junk", kFourGpus);
  EXPECT_THAT(visibility.selected, ElementsAre(3, 1));
  ASSERT_EQ(visibility.entries.size(), 3u);
  EXPECT_EQ(visibility.entries[1].text, " 1 ");  // as written, so the summary quotes what the user typed
  EXPECT_TRUE(visibility.entries[1].used);
  EXPECT_FALSE(visibility.entries[2].used);
}

}  // namespace
}  // namespace plimsoll
