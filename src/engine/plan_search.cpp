#include "engine/plan_search.hpp"

#include <algorithm>
#include <array>
#include <random>
#include <tuple>
#include <utility>

#include "engine/step_packing.hpp"

namespace plimsoll::engine {

namespace {

constexpr std::uint64_t kTopBand = 2ull << 20;   // the band under the footprint whose bytes the score counts
constexpr std::size_t kMaxTakenOut = 48;         // entries one move takes out, at most

// floor(1024 x sqrt(c)) for c = 0..63, then flat: a concave cost per granule, in integers so that every machine
// scores alike (Newton's method on integers: a few steps per entry, well inside any compiler's constexpr limits).
constexpr std::array<std::uint32_t, 64> kSqrt1024 = [] {
  std::array<std::uint32_t, 64> table{};
  for (std::uint32_t c = 1; c < table.size(); ++c) {
    const std::uint64_t n = std::uint64_t{c} << 20;
    std::uint64_t x = n, y = (x + 1) / 2;
    while (y < x) {
      x = y;
      y = (x + n / x) / 2;
    }
    table[c] = static_cast<std::uint32_t>(x);
  }
  return table;
}();

struct Score {
  std::uint64_t granules = 0;
  std::uint64_t footprint = 0, top_bytes = 0;
  // Last, on ties: the sum over unpaid granules of sqrt(entries covering it), x 1024. Lower when the entries crowd
  // onto fewer granules, so a sideways move toward emptying one is preferred.
  std::uint64_t spread = 0;
  auto key() const { return std::tie(granules, footprint, top_bytes, spread); }
  bool operator<=(const Score& o) const { return key() <= o.key(); }
  bool operator<(const Score& o) const { return key() < o.key(); }
};

class Search {
 public:
  Search(const StepObservation& step, const std::vector<Obstacle>& obstacles, std::uint64_t base, std::uint64_t span,
         const StepPlan& start, const SearchOptions& options)
      : step_(step), packing_(step, obstacles), base_(base), span_(span), options_(options), plan_(start),
        random_(options.seed) {
    if (options_.granule != 0 && options_.paid != nullptr) {
      covers_.assign(options_.paid->size(), 0);
      used_.assign(options_.paid->size(), 0);
      for (std::uint64_t k = 0; k < used_.size(); ++k) used_[k] = static_cast<char>(paid(k));
    }
    const std::size_t n = plan_.entries.size();
    max_died_.assign((n + kBlock - 1) / kBlock, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (plan_.entries[i].addr == 0) continue;
      planned_.push_back(i);
      if (step_.requests[i].pinned == 0) movable_.push_back(i);
      if (step_.requests[i].died == StepObservation::kOutlives) outliving_.push_back(i);
      else max_died_[i / kBlock] = std::max(max_died_[i / kBlock], step_.requests[i].died);
      cover(i, +1);
    }
    out_.assign(n, 0);
  }

  StepPlan run(SearchReport& report) {
    if (movable_.empty()) return std::move(plan_);
    Score score = current_score();
    std::uint64_t since_improved = 0;
    while (report.work < options_.budget && since_improved < options_.patience) {
      ++since_improved;
      // A move's own walks: choosing what to take out and scoring the result, each over the entries and granules.
      report.work += 2 * planned_.size() + 2 * covers_.size();
      ++report.moves;
      std::vector<std::uint32_t> taken_out = choose_move();
      if (taken_out.empty()) continue;
      std::vector<std::pair<std::uint32_t, std::uint64_t>> before;  // (entry, address): replace() reorders taken_out
      before.reserve(taken_out.size());
      for (const std::uint32_t i : taken_out) before.emplace_back(i, plan_.entries[i].addr);
      const bool placed = replace(taken_out, report);
      const Score after = placed ? current_score() : Score{};
      if (placed && after <= score) {
        ++report.accepted;
        if (after < score) {
          ++report.improved;
          since_improved = 0;
        }
        score = after;
        continue;
      }
      // Undo: the entries go back where they were (their places are still free: nothing else moved).
      for (const auto& [i, addr] : before) {
        if (out_[i] == 0) cover(i, -1);
        plan_.entries[i].addr = addr;
        out_[i] = 0;
        cover(i, +1);
      }
    }
    return std::move(plan_);
  }

 private:
  std::uint64_t end_of(std::uint32_t i) const { return plan_.entries[i].addr + plan_.entries[i].size; }
  std::uint64_t random_below(std::uint64_t n) { return n == 0 ? 0 : random_() % n; }

  // Counts entry i on (+1) or off (-1) the granules it covers; keeps `used_` and the unpaid count in step.
  void cover(std::uint32_t i, int delta) {
    if (options_.granule == 0) return;
    const std::uint64_t g = options_.granule;
    const std::uint64_t first = (plan_.entries[i].addr - base_) / g;
    const std::uint64_t last = (end_of(i) - base_ + g - 1) / g;
    if (covers_.size() < last) {
      covers_.resize(last, 0);
      used_.resize(last, 0);
      for (std::uint64_t k = 0; k < last; ++k) used_[k] = static_cast<char>(paid(k) || covers_[k] > 0);
    }
    for (std::uint64_t k = first; k < last; ++k) {
      if (delta > 0) {
        if (covers_[k]++ == 0 && !paid(k)) ++unpaid_;
        used_[k] = 1;
      } else {
        if (--covers_[k] == 0) {
          if (!paid(k)) --unpaid_;
          used_[k] = static_cast<char>(paid(k));
        }
      }
    }
  }
  bool paid(std::uint64_t g) const { return options_.paid != nullptr && g < options_.paid->size() && (*options_.paid)[g]; }

  Score current_score() const {
    Score s;
    s.granules = unpaid_;
    for (std::uint64_t k = 0; k < covers_.size(); ++k)
      if (covers_[k] > 0 && !paid(k)) s.spread += kSqrt1024[std::min<std::size_t>(covers_[k], kSqrt1024.size() - 1)];
    std::uint64_t top = base_;
    for (const std::uint32_t i : planned_) top = std::max(top, end_of(i));
    s.footprint = top - base_;
    const std::uint64_t band = top - std::min(top - base_, kTopBand);
    for (const std::uint32_t i : planned_)
      if (end_of(i) > band) s.top_bytes += end_of(i) - std::max(band, plan_.entries[i].addr);
    return s;
  }

  // The entries one move takes out (none: nothing to do this time).
  std::vector<std::uint32_t> choose_move() {
    std::vector<std::uint32_t> chosen;
    if (options_.granule != 0 && random_below(2) == 0 && unpaid_ > 0) {
      // Every entry on one granule nothing else pays for: placed again, they may all find room on paid granules.
      std::vector<std::uint64_t> unpaid;
      for (std::uint64_t k = 0; k < covers_.size(); ++k)
        if (covers_[k] > 0 && !paid(k)) unpaid.push_back(k);
      // The least crowded of three drawn: the likeliest to be emptied.
      std::uint64_t g = unpaid[random_below(unpaid.size())];
      for (int draw = 0; draw < 2; ++draw) {
        const std::uint64_t other = unpaid[random_below(unpaid.size())];
        if (covers_[other] < covers_[g]) g = other;
      }
      const std::uint64_t lo = base_ + g * options_.granule, hi = lo + options_.granule;
      for (const std::uint32_t i : planned_) {
        if (plan_.entries[i].addr >= hi || end_of(i) <= lo) continue;
        if (step_.requests[i].pinned != 0) return {};  // a pinned entry keeps the granule paid for anyway
        chosen.push_back(i);
      }
    } else {
      // An entry at the top of the plan, and those live at the same time that reach up near it.
      std::uint64_t top = 0;
      for (const std::uint32_t i : movable_) top = std::max(top, end_of(i));
      std::vector<std::uint32_t> at_top;
      for (const std::uint32_t i : movable_)
        if (end_of(i) == top) at_top.push_back(i);
      const std::uint32_t t = at_top[random_below(at_top.size())];
      const std::uint64_t windows[] = {0, plan_.entries[t].size, 2 * plan_.entries[t].size, 4ull << 20, 16ull << 20};
      const std::uint64_t window = windows[random_below(std::size(windows))];
      const std::uint64_t floor = plan_.entries[t].addr - std::min(plan_.entries[t].addr - base_, window);
      const auto& rt = step_.requests[t];
      for (const std::uint32_t i : movable_) {
        if (i == t || end_of(i) <= floor) continue;
        if (packing::lifetimes_overlap(rt, packing_.died(t), step_.requests[i], packing_.died(i))) chosen.push_back(i);
      }
      if (chosen.size() >= kMaxTakenOut) {  // keep the highest-reaching ones
        std::nth_element(chosen.begin(), chosen.begin() + kMaxTakenOut - 1, chosen.end(),
                         [&](std::uint32_t a, std::uint32_t b) {  // ties by index: the same cut on every library
                           return end_of(a) != end_of(b) ? end_of(a) > end_of(b) : a < b;
                         });
        chosen.resize(kMaxTakenOut - 1);
      }
      chosen.push_back(t);
    }
    return chosen;
  }

  // Places the entries taken out again, in one of a few orders, each by one of the packer's rules. False when one
  // no longer fits in the span (the caller undoes the move).
  bool replace(std::vector<std::uint32_t>& taken_out, SearchReport& report) {
    for (const std::uint32_t i : taken_out) {
      cover(i, -1);
      out_[i] = 1;
    }
    const auto lifetime = [&](std::uint32_t i) { return packing_.died(i) - step_.requests[i].born; };
    switch (random_below(3)) {
      case 0:
        std::sort(taken_out.begin(), taken_out.end(), [&](std::uint32_t a, std::uint32_t b) {
          const auto& ra = step_.requests[a];
          const auto& rb = step_.requests[b];
          return std::make_tuple(ra.size, lifetime(a), b) > std::make_tuple(rb.size, lifetime(b), a);
        });
        break;
      case 1:
        std::sort(taken_out.begin(), taken_out.end(), [&](std::uint32_t a, std::uint32_t b) {
          return std::make_tuple(lifetime(a), step_.requests[a].size, b) >
                 std::make_tuple(lifetime(b), step_.requests[b].size, a);
        });
        break;
      default:
        for (std::size_t k = taken_out.size(); k > 1; --k) std::swap(taken_out[k - 1], taken_out[random_below(k)]);
    }
    // 0: best fit, 1: first fit, 2: granule-aware (only with a granule).
    const std::uint64_t rule = random_below(options_.granule != 0 ? 3 : 2);
    std::vector<std::uint32_t> others;
    for (const std::uint32_t i : taken_out) {
      candidates(i, others, report);
      packing_.collect(i, plan_, others);
      report.work += packing_.fixed.size() + packing_.early.size();  // the obstacles it copies in
      const std::uint64_t size = step_.requests[i].size;
      const std::uint64_t addr = rule == 2 ? packing_.place_in_granules(size, base_, options_.granule, used_)
                                           : packing_.place(size, base_, rule == 0);
      if (addr + size > base_ + span_) return false;
      plan_.entries[i].addr = addr;
      out_[i] = 0;
      cover(i, +1);
    }
    return true;
  }

  // Every placed entry whose lifetime may meet request i's (a superset; Packing::collect tests each exactly), each
  // counted as one unit of work. Requests are in birth order, so those born before i dies are a prefix; within it,
  // blocks of kBlock requests that all died before i was born are skipped whole. Requests that outlive the step
  // (and, for one of them, every entry: its [0, held_until) meets any) are listed apart.
  void candidates(std::uint32_t i, std::vector<std::uint32_t>& found, SearchReport& report) const {
    found.clear();
    const StepObservation::Request& request = step_.requests[i];
    if (request.died == StepObservation::kOutlives) {
      for (const std::uint32_t j : planned_)
        if (out_[j] == 0) found.push_back(j);
      report.work += planned_.size();
      return;
    }
    const auto born_after = std::partition_point(step_.requests.begin(), step_.requests.end(),
                                                 [&](const StepObservation::Request& r) { return r.born < request.died; });
    const auto prefix = static_cast<std::size_t>(born_after - step_.requests.begin());
    for (std::size_t b = 0; b * kBlock < prefix; ++b) {
      ++report.work;
      if (max_died_[b] <= request.born) continue;
      for (std::size_t j = b * kBlock; j < std::min(prefix, (b + 1) * kBlock); ++j) {
        ++report.work;
        const auto& r = step_.requests[j];
        if (r.died != StepObservation::kOutlives && r.died > request.born && plan_.entries[j].addr != 0 && out_[j] == 0)
          found.push_back(static_cast<std::uint32_t>(j));
      }
    }
    for (const std::uint32_t j : outliving_)
      if (out_[j] == 0) found.push_back(j);
    report.work += outliving_.size();
  }

  static constexpr std::size_t kBlock = 64;
  const StepObservation& step_;
  packing::Packing packing_;
  std::uint64_t base_, span_;
  SearchOptions options_;
  StepPlan plan_;
  std::mt19937_64 random_;
  std::vector<std::uint32_t> planned_;  // entries with an address (pinned ones included)
  std::vector<std::uint32_t> movable_;  // of those, the ones not pinned
  std::vector<char> out_;               // taken out by the current move, not yet placed again
  std::vector<std::uint32_t> outliving_;  // planned entries that outlive the step
  std::vector<std::uint32_t> max_died_;   // per block of kBlock requests: the latest death among those that die
  std::vector<std::uint32_t> covers_;   // per granule from base: how many entries cover it
  std::vector<char> used_;              // per granule: paid, or covered by an entry
  std::uint64_t unpaid_ = 0;            // granules covered by entries and not paid
};

}  // namespace

StepPlan improve_plan(const StepObservation& step, const std::vector<Obstacle>& obstacles, std::uint64_t base,
                      std::uint64_t span, const StepPlan& start, const SearchOptions& options, SearchReport* report) {
  SearchReport local;
  SearchReport& out = report != nullptr ? *report : local;
  out = {};
  if (start.entries.empty() || options.budget == 0) return start;
  StepPlan plan = Search(step, obstacles, base, span, start, options).run(out);
  packing::finish_plan(step, base, plan);
  return plan;
}

std::uint64_t step_max_load(const StepObservation& step, const std::vector<Obstacle>& obstacles) {
  std::vector<std::pair<std::uint32_t, std::int64_t>> changes;  // (tick, bytes): frees before births at one tick
  changes.reserve(2 * step.requests.size() + 2 * obstacles.size());
  for (const Obstacle& o : obstacles) {
    changes.emplace_back(0, static_cast<std::int64_t>(o.size));
    if (o.until < step.ticks) changes.emplace_back(o.until, -static_cast<std::int64_t>(o.size));
  }
  for (const StepObservation::Request& r : step.requests) {
    if (r.growth) continue;
    const auto bytes = static_cast<std::int64_t>(r.size);
    if (r.died != StepObservation::kOutlives) {
      changes.emplace_back(r.born, bytes);
      changes.emplace_back(r.died, -bytes);
    } else if (r.held_until > r.born) {  // [0, held_until) and [born, ticks) meet: live the whole step
      changes.emplace_back(0, bytes);
    } else {
      if (r.held_until > 0) {
        changes.emplace_back(0, bytes);
        changes.emplace_back(r.held_until, -bytes);
      }
      changes.emplace_back(r.born, bytes);
    }
  }
  std::sort(changes.begin(), changes.end());
  std::int64_t live = 0, peak = 0;
  for (const auto& [tick, delta] : changes) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<std::uint64_t>(peak);
}

}  // namespace plimsoll::engine
