#pragma once
// An Allocator for cuda:0 over CudaVmmBacking and the fake driver (tests/fake_cuda_driver.hpp), for the tests of
// stream-ordered reuse.
#include <cstdint>
#include <memory>

#include "backings/cuda_vmm_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll::fake_cuda {

inline std::unique_ptr<Allocator> fake_cuda_allocator(const Driver& driver, std::uint64_t limit,
                                                      Growth growth = Growth::on_demand) {
  auto backing = std::make_unique<backings::CudaVmmBacking>(driver.api(), 0);
  DeviceDescription description;
  description.name = "cuda:0";
  description.hardware = "Fake GPU (memfd)";
  description.policy.growth = growth;
  description.limit_bytes = limit;
  description.total_bytes = backing->memory().total_bytes;
  return std::make_unique<Allocator>(description, std::move(backing));
}

inline plimsoll::Stream on(Stream& stream) { return plimsoll::Stream{stream.handle()}; }

}  // namespace plimsoll::fake_cuda
