// One allocation's size against the batch size: constant, linear, neither, unmatched; and which sizes of two
// recordings can be the same allocation.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "plan/allocation_matching.hpp"
#include "plan/size_fit.hpp"

namespace plimsoll::plan {
namespace {

TEST(PlanSizeFit, ConstantLinearNeitherUnmatched) {
  const FittedSize constant = fit_size({{16, 4096}, {8, 4096}});
  EXPECT_EQ(constant.kind, SizeFit::constant);
  EXPECT_EQ(constant.bytes_at(1000), 4096u);

  const FittedSize linear = fit_size({{16, 64 + 512 * 16}, {8, 64 + 512 * 8}, {32, 64 + 512 * 32}});
  EXPECT_EQ(linear.kind, SizeFit::linear);
  EXPECT_EQ(linear.bytes_at(100), 64u + 512 * 100);
  EXPECT_EQ(linear.bytes_at(1), 576u);

  // Within rounding (a few bytes of padding) a line is still a line.
  EXPECT_EQ(fit_size({{8, 8000}, {16, 16008}, {32, 32000}}).kind, SizeFit::linear);

  const FittedSize quadratic = fit_size({{8, 16 * 64}, {16, 16 * 256}, {32, 16 * 1024}});
  EXPECT_EQ(quadratic.kind, SizeFit::none);
  EXPECT_EQ(quadratic.bytes_at(24), 16 * 256 + (16 * 1024 - 16 * 256) / 2);  // on the chord
  EXPECT_EQ(quadratic.bytes_at(64), 16 * 1024 + 2 * (16 * 1024 - 16 * 256));  // the last chord, extended

  // Two points always lie on a line, but not one that goes negative at batch 1: that is no clean fit.
  EXPECT_EQ(fit_size({{8, 100}, {16, 1000}}).kind, SizeFit::none);
  // Nor one that shrinks as the batch grows.
  EXPECT_EQ(fit_size({{8, 1000}, {16, 900}}).kind, SizeFit::none);

  const FittedSize alone = fit_size({{16, 777}});
  EXPECT_EQ(alone.kind, SizeFit::unmatched);
  EXPECT_EQ(alone.bytes_at(64), 777u);
}

TEST(PlanSizeFit, CompatibleSizesGrowNoFasterThanTheBatch) {
  EXPECT_TRUE(sizes_compatible(1000, 8, 1000, 16));   // constant
  EXPECT_TRUE(sizes_compatible(1000, 8, 2000, 16));   // proportional
  EXPECT_TRUE(sizes_compatible(1064, 8, 2064, 16));   // linear with a constant part
  EXPECT_TRUE(sizes_compatible(2000, 16, 1000, 8));   // either order
  EXPECT_FALSE(sizes_compatible(1000, 8, 5000, 16));  // faster than the batch
  EXPECT_FALSE(sizes_compatible(100000, 8, 50000, 16));  // shrinking
  EXPECT_FALSE(sizes_compatible(1000, 8, 2000, 8));   // same batch, different size
}

}  // namespace
}  // namespace plimsoll::plan
