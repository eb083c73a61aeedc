#pragma once
// Data parallelism over processes (`plimsoll train --nproc N`, or one rank of a multi-machine job): the ranks meet
// through c10d's TCP store and average their gradients with Gloo's all-reduce, as torchrun-launched jobs do. This
// header includes no libtorch header and compiles as C++17 and C++20; process_group.cpp holds the libtorch side.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plimsoll/error.hpp"

namespace plimsoll::train {

class Replica;

/// Where the ranks meet and how long a collective may wait for a silent rank.
struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";  // rank 0 serves the store here
  std::uint16_t master_port = 29500;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/// A collective could not finish: another rank is gone, stopped answering past the timeout, or announced a failure.
/// what() names the rank and the cause where one was announced.
class RankLost : public Error {
 public:
  using Error::Error;
};

class ProcessGroup {
 public:
  /// Joins the group: blocks until every rank has joined or the timeout passes (then RankLost, naming the address).
  explicit ProcessGroup(const ProcessGroupOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const noexcept;
  int world_size() const noexcept;

  /// Sets the replica's gradients and batch-norm running statistics to their mean over the ranks, in one
  /// all-reduce of a flat buffer (allocated on the replica's device, tag "gradients").
  void average(Replica& replica);
  /// True when every rank's weights and batch-norm statistics are bitwise equal (an all-gather of a hash).
  bool replicas_identical(const Replica& replica);
  /// Element-wise sums over the ranks (loss sums, sample counts), as doubles.
  std::vector<double> sum(const std::vector<double>& values);
  /// Every rank's text, in rank order, on rank 0; an empty list on the others.
  std::vector<std::string> gather_on_root(const std::string& text);

  /// Tells the other ranks why this one stops (an out-of-memory), before it leaves; they read it when their next
  /// collective fails. Rank 0 serves the store, so it waits (bounded) until the others have read it.
  void announce_failure(const std::string& why);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace plimsoll::train
