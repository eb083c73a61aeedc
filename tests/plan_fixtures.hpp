#pragma once
// Inputs for `plimsoll plan`'s tests: synthetic training steps whose sizes are exactly constant or linear in the
// batch size (so a prediction can be checked byte for byte against the trace written at that batch size), and the
// real `plimsoll train` recordings kept gzipped in tests/data/plan (tests/data/plan/README.md says how they were
// made).
#include <zlib.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace plimsoll::testing {

struct ToyStep {
  std::string model = "toy";
  std::string optimizer = "sgd";
  int steps = 3;
  bool marker = true;
  bool quadratic = false;        // one allocation per step of 16 * batch^2 bytes: fits neither
  bool extra_in_step_two = false;  // one more allocation in step 2, with a call site no other recording has
};

/// A training job in the text trace format at `batch`: weights before the steps; per step an activation, a
/// temporary and an output linear in the batch size, gradients made in step 1 and optimizer state in step 2 that
/// live on.
inline std::string toy_trace(std::uint64_t batch, const ToyStep& toy = {}) {
  std::string text;
  if (toy.marker) text += fmt::format("# model {} batch {} optimizer {}\n", toy.model, batch, toy.optimizer);
  int id = 0;
  const auto allocate = [&](std::uint64_t bytes) {
    text += fmt::format("a {} {}\n", ++id, bytes);
    return id;
  };
  const auto free = [&](int which) { text += fmt::format("f {}\n", which); };
  allocate(4096);  // weights
  allocate(1000);
  for (int step = 1; step <= toy.steps; ++step) {
    text += fmt::format("# step {} begin\n", step);
    const int activation = allocate(1000 * batch);
    const int temporary = allocate(64 + 512 * batch);
    free(temporary);
    const int output = allocate(8 + 100 * batch);
    if (toy.quadratic) free(allocate(16 * batch * batch));
    if (toy.extra_in_step_two && step == 2) free(allocate(300 * batch));
    if (step == 1) {
      allocate(4096);  // gradients
      allocate(1000);
    }
    if (step == 2) allocate(8192);  // optimizer state
    free(activation);
    free(output);
    text += fmt::format("# step {} end\n", step);
  }
  return text;
}

/// Writes `text` to a file of this test's own under the test temp dir; returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           "_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

/// A recording of tests/data/plan (fashion_cnn_b8, _b16, _b32: `plimsoll train` at that batch size), unzipped into
/// the temp dir; returns its path.
inline std::string recorded_cnn(std::uint64_t batch) {
  const std::string zipped = fmt::format("{}/tests/data/plan/fashion_cnn_b{}.plimsoll.gz", PLIMSOLL_SOURCE_DIR, batch);
  gzFile in = gzopen(zipped.c_str(), "rb");
  if (in == nullptr) {
    ADD_FAILURE() << "cannot open " << zipped;
    return "";
  }
  std::string bytes;
  std::array<char, 1 << 16> buffer{};
  for (int got = 0; (got = gzread(in, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0;) {
    bytes.append(buffer.data(), static_cast<std::size_t>(got));
  }
  gzclose(in);
  return write_temp(fmt::format("fashion_cnn_b{}.plimsoll", batch), bytes);
}

}  // namespace plimsoll::testing
