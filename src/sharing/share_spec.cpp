// cuda:N=SHARE[:CAP]: parsing and resolving against a GPU's size.
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "devices/proc_text.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {

namespace {

constexpr const char* kForm = "cuda:N=SHARE[:CAP], e.g. cuda:0=8GiB:16GiB or cuda:0=25%:50% (SHARE is guaranteed, "
                              "the job may borrow up to CAP while the GPU has room)";

// Checks an amount as written ("8GiB", "25%") without a GPU size; returns it trimmed.
std::string check_amount(std::string_view text, std::string_view whole, const char* what) {
  const std::string_view amount = trim_blanks(text);
  if (amount.empty()) throw InvalidArgument(fmt::format("'{}' has no {}: write {}", whole, what, kForm));
  if (amount.back() == '%') {
    const std::string number(amount.substr(0, amount.size() - 1));
    char* end = nullptr;
    const double percent = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(percent > 0.0) || percent > 100.0)
      throw InvalidArgument(fmt::format("'{}': the {} '{}' is not a percentage in (0, 100]: write {}", whole, what,
                                        amount, kForm));
  } else {
    try {
      if (parse_size(amount) == 0)
        throw InvalidArgument(fmt::format("'{}': the {} is zero: write {}", whole, what, kForm));
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(fmt::format("'{}': the {} is not a size ({}); write {}", whole, what, error.what(), kForm));
    }
  }
  return std::string(amount);
}

std::uint64_t resolve_amount(const std::string& amount, std::uint64_t device_bytes) {
  if (!amount.empty() && amount.back() == '%') {
    const double percent = std::strtod(amount.c_str(), nullptr);
    return static_cast<std::uint64_t>(std::floor(static_cast<double>(device_bytes) * percent / 100.0));
  }
  return parse_size(amount);
}

}  // namespace

std::string ShareSpec::str() const {
  return cap.empty() ? fmt::format("cuda:{}={}", device, share) : fmt::format("cuda:{}={}:{}", device, share, cap);
}

std::pair<std::uint64_t, std::uint64_t> ShareSpec::resolve(std::uint64_t device_bytes) const {
  const std::uint64_t share_bytes = resolve_amount(share, device_bytes);
  const std::uint64_t cap_bytes = cap.empty() ? share_bytes : resolve_amount(cap, device_bytes);
  if (share_bytes > device_bytes || cap_bytes > device_bytes)
    throw InvalidArgument(fmt::format("'{}' asks for more than the GPU has ({}): lower the share and cap", str(),
                                      format_size(device_bytes)));
  if (cap_bytes < share_bytes)
    throw InvalidArgument(fmt::format("'{}': the cap ({}) is below the share ({}); the cap is the most the job may "
                                      "hold, so it must be at least the share", str(), format_size(cap_bytes),
                                      format_size(share_bytes)));
  return {share_bytes, cap_bytes};
}

ShareSpec parse_share_spec(std::string_view text) {
  const std::string_view whole = trim_blanks(text);
  const std::size_t equals = whole.find('=');
  if (whole.substr(0, 5) != "cuda:" || equals == std::string_view::npos)
    throw InvalidArgument(fmt::format("'{}' is not a GPU share: write {}", whole, kForm));
  const auto index = parse_decimal(whole.substr(5, equals - 5));
  if (!index || *index > 1023)
    throw InvalidArgument(fmt::format("'{}': '{}' is not a GPU index (cuda:0, cuda:1, ...); write {}", whole,
                                      whole.substr(0, equals), kForm));
  ShareSpec spec;
  spec.device = static_cast<int>(*index);
  const std::string_view amounts = whole.substr(equals + 1);
  const std::size_t colon = amounts.find(':');
  spec.share = check_amount(amounts.substr(0, colon), whole, "share");
  if (colon != std::string_view::npos) spec.cap = check_amount(amounts.substr(colon + 1), whole, "cap");
  // Caught here when both are sizes; a percentage is checked once the GPU's size is known (resolve).
  if (!spec.cap.empty() && spec.share.back() != '%' && spec.cap.back() != '%' &&
      parse_size(spec.cap) < parse_size(spec.share))
    throw InvalidArgument(fmt::format("'{}': the cap is below the share; the cap is the most the job may hold, so "
                                      "it must be at least the share: write {}", whole, kForm));
  return spec;
}

std::vector<ShareSpec> parse_share_specs(std::string_view text) {
  std::vector<ShareSpec> specs;
  std::set<int> devices;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view part = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    specs.push_back(parse_share_spec(part));
    if (!devices.insert(specs.back().device).second)
      throw InvalidArgument(fmt::format("'{}' names cuda:{} twice: give each GPU one share", text,
                                        specs.back().device));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return specs;
}

}  // namespace plimsoll
