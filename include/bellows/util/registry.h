// A registry of named entries filled by static registrars in the entries' own files (models, data sources):
// thread-safe, stable references, lookups that fail with "did you mean" for a misspelt name.
#pragma once

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace bellows {

// The hint for `name`, which is none of `names`: "did you mean 'x'? (valid: a, b, x)", or "use one of: a, b, x"
// when none is close (util/suggest.h).
std::string suggestion_hint(const std::string& name, const std::vector<std::string>& names);

namespace detail {
[[noreturn]] void registry_duplicate(const std::string& what, const std::string& name);
[[noreturn]] void registry_unknown(const std::string& what, const std::string& name, std::vector<std::string> names);
}  // namespace detail

// `Entry` has a std::string member `name`. `what` names the kind in errors ("model", "data source").
template <class Entry>
class Registry {
 public:
  explicit Registry(std::string what) : what_(std::move(what)) {}

  void add(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : entries_) {
      if (e.name == entry.name) detail::registry_duplicate(what_, entry.name);
    }
    entries_.push_back(std::move(entry));
  }

  // Sorted by name.
  std::vector<Entry> all() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Entry> sorted(entries_.begin(), entries_.end());
    std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    return sorted;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> names;
    for (const auto& e : entries_) names.push_back(e.name);
    std::sort(names.begin(), names.end());
    return names;
  }

  // kConfig error naming the unknown entry and the closest registered name.
  const Entry& find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> names;
    for (const auto& e : entries_) {
      if (e.name == name) return e;
      names.push_back(e.name);
    }
    detail::registry_unknown(what_, name, std::move(names));
  }

 private:
  std::string what_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // a deque: find() hands out references that later additions keep valid
};

// The process's one registry of `Entry`s (a template's function-local static: one per entry type), made on first use,
// since registrars in other files may run before anything in the registering file is initialised. `what` names the
// kind in errors.
template <class Entry>
Registry<Entry>& registry_of(const char* what) {
  static Registry<Entry> r(what);
  return r;
}

// The names of `entries`, in their order.
template <class Entry>
std::vector<std::string> names_of(const std::vector<Entry>& entries) {
  std::vector<std::string> names;
  names.reserve(entries.size());
  for (const auto& e : entries) names.push_back(e.name);
  return names;
}

// Entries that have an `order` member, in that order (equal orders stay sorted by name).
template <class Entry>
std::vector<Entry> in_order(std::vector<Entry> entries) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  return entries;
}

}  // namespace bellows
