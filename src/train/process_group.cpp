// ProcessGroup (process_group.hpp): c10d's TCP store for the rendezvous and the failure notes, Gloo for the
// collectives. C++17: libtorch's headers.
#include "train/process_group.hpp"

#include <csignal>
#include <cstring>
#include <exception>
#include <utility>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "plimsoll/torch.hpp"
#include "train/replica.hpp"
#include "train/replica_tensors.hpp"

namespace plimsoll::train {
namespace {

const std::string kFailureKey = "plimsoll/failure";

std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// FNV-1a over the bytes of every tensor: equal states give equal hashes on every rank and platform.
std::int64_t state_hash(const std::vector<at::Tensor>& tensors) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const at::Tensor& tensor : tensors) {
    const at::Tensor dense = tensor.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(dense.data_ptr());
    const auto count = static_cast<std::size_t>(dense.numel()) * static_cast<std::size_t>(dense.element_size());
    for (std::size_t i = 0; i < count; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  std::int64_t out = 0;
  std::memcpy(&out, &hash, sizeof out);
  return out;
}

}  // namespace

struct ProcessGroup::Impl {
  ProcessGroupOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;

  // A collective failed with `error`: find out why from the store (a failure another rank announced), then throw
  // RankLost with the most useful message.
  [[noreturn]] void lost(const std::string& during, const std::exception& error) {
    std::string announced;
    try {
      // The failing rank writes its note before it leaves; give it a moment.
      store->wait({kFailureKey}, std::chrono::milliseconds(3000));
      announced = text_of(store->get(kFailureKey));
      store->set("plimsoll/read/" + std::to_string(options.rank), bytes_of("1"));
    } catch (const std::exception&) {
      // No note: the rank died without one (killed), or rank 0, which serves the store, is gone.
    }
    if (!announced.empty()) {
      throw RankLost("stopping: " + announced);
    }
    std::string what = error.what();
    what = what.substr(0, what.find('\n'));
    throw RankLost("lost contact with the other ranks during " + during + " (" + what +
                   "): another rank stopped without saying why (killed, or crashed); its own output says more");
  }

  template <class F>
  auto collective(const std::string& during, F&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const RankLost&) {
      throw;
    } catch (const std::exception& error) {
      lost(during, error);
    }
  }
};

ProcessGroup::ProcessGroup(const ProcessGroupOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  // Gloo writes to its sockets with writev: a write to a rank that died would kill this one with SIGPIPE before it
  // could say what happened. Ignored (as Python does), the write fails with EPIPE and the collective reports it.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = options.master_port;
    store_options.isServer = options.rank == 0;
    store_options.numWorkers = static_cast<std::size_t>(options.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
    // A job on one machine keeps its traffic on the loopback interface; ranks on several machines talk over the
    // interface that this machine's name resolves to.
    const bool loopback = options.master_addr == "127.0.0.1" || options.master_addr == "localhost";
    gloo->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    gloo->threads = 1;
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, options.rank, options.world_size, gloo);
  } catch (const std::exception& error) {
    std::string what = error.what();
    what = what.substr(0, what.find('\n'));
    throw RankLost("rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) +
                   " could not join the group at " + where + " within " +
                   std::to_string(options.timeout.count() / 1000) + " s (" + what +
                   "): start every rank with the same --world-size and --master, rank 0 first reachable there");
  }
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const noexcept { return impl_->options.rank; }
int ProcessGroup::world_size() const noexcept { return impl_->options.world_size; }

void ProcessGroup::average(Replica& replica) {
  impl_->collective("the gradient all-reduce", [&] {
    plimsoll::torch::DeviceScope scope(replica.device());
    plimsoll::torch::TagScope tagged(plimsoll::torch::tags::gradients);
    ::torch::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors = ReplicaTensors::averaged(replica);
    std::vector<at::Tensor> flat_parts;
    flat_parts.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) flat_parts.push_back(tensor.reshape({-1}));
    std::vector<at::Tensor> buffer{::torch::cat(flat_parts)};
    impl_->group->allreduce(buffer)->wait(impl_->options.timeout);
    buffer[0].div_(static_cast<double>(impl_->options.world_size));
    std::int64_t offset = 0;
    for (at::Tensor& tensor : tensors) {
      tensor.copy_(buffer[0].narrow(0, offset, tensor.numel()).view_as(tensor));
      offset += tensor.numel();
    }
  });
}

bool ProcessGroup::replicas_identical(const Replica& replica) {
  return impl_->collective("the replica check", [&] {
    plimsoll::torch::DeviceScope scope(replica.device());
    std::vector<at::Tensor> mine{::torch::full({1}, state_hash(ReplicaTensors::state(replica)), ::torch::kLong)};
    std::vector<std::vector<at::Tensor>> all(1);
    for (int r = 0; r < impl_->options.world_size; ++r) all[0].push_back(::torch::empty({1}, ::torch::kLong));
    impl_->group->allgather(all, mine)->wait(impl_->options.timeout);
    for (const at::Tensor& other : all[0]) {
      if (other.item<std::int64_t>() != mine[0].item<std::int64_t>()) return false;
    }
    return true;
  });
}

std::vector<double> ProcessGroup::sum(const std::vector<double>& values) {
  return impl_->collective("a sum over the ranks", [&] {
    std::vector<at::Tensor> buffer{::torch::tensor(values, ::torch::kDouble)};
    impl_->group->allreduce(buffer)->wait(impl_->options.timeout);
    const at::Tensor& summed = buffer[0];
    return std::vector<double>(summed.data_ptr<double>(), summed.data_ptr<double>() + summed.numel());
  });
}

std::vector<std::string> ProcessGroup::gather_on_root(const std::string& text) {
  return impl_->collective("the report gathering", [&] {
    impl_->store->set("plimsoll/report/" + std::to_string(impl_->options.rank), bytes_of(text));
    std::vector<std::string> texts;
    if (impl_->options.rank != 0) return texts;
    for (int r = 0; r < impl_->options.world_size; ++r) {
      texts.push_back(text_of(impl_->store->get("plimsoll/report/" + std::to_string(r))));
    }
    return texts;
  });
}

void ProcessGroup::announce_failure(const std::string& why) {
  try {
    impl_->store->set(kFailureKey, bytes_of("rank " + std::to_string(impl_->options.rank) + " " + why));
    if (impl_->options.rank != 0) return;
    // The others read the note from this process's store when their collective fails; leaving at once would take
    // the store with it. Closing the Gloo connections first makes their collective fail now rather than at its
    // timeout; then the store stays up until each has read the note (a few seconds at most).
    impl_->group.reset();
    std::vector<std::string> read_keys;
    for (int r = 1; r < impl_->options.world_size; ++r) read_keys.push_back("plimsoll/read/" + std::to_string(r));
    impl_->store->wait(read_keys, std::min(impl_->options.timeout, std::chrono::milliseconds(10000)));
  } catch (const std::exception&) {
    // Best effort: the others still stop, through the collective's own failure or timeout.
  }
}

}  // namespace plimsoll::train
