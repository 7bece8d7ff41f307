#include "name_registry.hpp"

#include <algorithm>
#include <cstring>

#include "fork_window.hpp"
#include "held_here.hpp"
#include "utf8.hpp"

namespace ferrum_replay::recorder {

NameRegistry::NameRegistry(bool reject_all, std::optional<std::string> reject_domain)
    : reject_all_(reject_all), reject_domain_(std::move(reject_domain)) {
  global_.id = 0;
  global_.reject_target = reject_all_ || reject_domain_ == kGlobalDomainName;
  domain_names_.emplace_back(kGlobalDomainName);
}

NameRegistry::~NameRegistry() = default;

// Every lock here is held through common::HeldHere: the exit report reads these names, and an
// exit() from a signal handler that interrupted a thread in here must not wait for that thread.

bool NameRegistry::take_budget_locked(size_t bytes) {
  if (bytes > kNamesBudget - names_bytes_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  names_bytes_ += bytes;
  return true;
}

nvtxDomainRegistration_st *NameRegistry::add_domain_locked(std::string key) {
  auto handle = std::make_unique<nvtxDomainRegistration_st>();
  handle->id = static_cast<uint32_t>(domain_names_.size());
  handle->reject_target = reject_all_ || (reject_domain_ && key == *reject_domain_);
  domain_names_.push_back(key);
  return domains_.emplace(std::move(key), std::move(handle)).first->second.get();
}

nvtxDomainRegistration_st *NameRegistry::create_domain(std::string_view name) {
  name = bounded_name(name);
  // A signal handler that interrupted this thread inside one of our locks (held_here.hpp), or a
  // fork handler or signal handler inside our fork window (fork_window.hpp): waiting for it
  // would wait for ever. A null domain is what NVTX hands out without a tool (not counted: the
  // program's ranges in it go to the global domain and are recorded there).
  if (cannot_wait_for_our_locks()) return nullptr;
  const common::HeldHere lock(mu_);
  std::string key(name);
  auto it = domains_.find(key);
  if (it != domains_.end()) {
    if (key == kept_domain_) kept_domain_asked_ = true;
    return it->second.get();
  }
  // Not refused for the budget: a domain is the program's handle, and each must stay itself
  // (its own stacks, its own depth, its own rejection), so domains count against the budget
  // but are kept beyond it too. Bounded by their number (kMaxDomains, the header says why).
  if (domains_.size() >= kMaxDomains && key != kept_domain_ && key != reject_domain_) {
    if (!more_domains_) {
      more_domains_ = std::make_unique<nvtxDomainRegistration_st>();
      more_domains_->id = static_cast<uint32_t>(domain_names_.size());
      // Rejected as a domain of that name would be: the name the trace and table show
      // (review NN-3).
      more_domains_->reject_target = reject_all_ || reject_domain_ == kMoreDomainsName;
      domain_names_.emplace_back(kMoreDomainsName);
    }
    return more_domains_.get();
  }
  names_bytes_ += std::min(kNamesBudget - names_bytes_, 2 * name.size() + kEntryOverhead);
  return add_domain_locked(std::move(key));
}

uint32_t NameRegistry::keep_domain(std::string_view name) {
  const common::HeldHere lock(mu_);
  std::string key(bounded_name(name));
  kept_domain_ = key;
  kept_domain_asked_ = false;
  auto it = domains_.find(key);
  if (it != domains_.end()) {
    kept_domain_id_ = it->second->id;
    return kept_domain_id_;
  }
  names_bytes_ += std::min(kNamesBudget - names_bytes_, 2 * key.size() + kEntryOverhead);
  kept_domain_id_ = add_domain_locked(std::move(key))->id;
  return kept_domain_id_;
}

bool NameRegistry::domains_shared() const {
  const common::HeldHere lock(mu_);
  return more_domains_ != nullptr;
}

uint32_t NameRegistry::unasked_domain() const {
  const common::HeldHere lock(mu_);
  return kept_domain_ && !kept_domain_asked_ ? kept_domain_id_ : 0;
}

nvtxStringRegistration_st *NameRegistry::register_string(std::string_view text) {
  text = bounded_name(text);
  if (cannot_wait_for_our_locks()) return nullptr;  // as in create_domain
  const common::HeldHere lock(mu_);
  std::string key(text);
  auto it = strings_.find(key);
  if (it != strings_.end()) return &it->second->handle;
  if (2 * text.size() + kEntryOverhead > kNamesBudget - names_bytes_)  // the key and the copy
    return nullptr;  // not refused: kept by the caller
  names_bytes_ += 2 * text.size() + kEntryOverhead;
  auto entry = std::make_unique<StringEntry>();
  entry->storage.reset(new char[text.size() + 1]);
  std::memcpy(entry->storage.get(), text.data(), text.size());
  entry->storage[text.size()] = '\0';
  entry->handle.text = entry->storage.get();
  entry->handle.size = text.size();
  return &strings_.emplace(std::move(key), std::move(entry)).first->second->handle;
}

void NameRegistry::name_thread(uint32_t tid, std::string_view name) {
  name = bounded_name(name);
  if (cannot_wait_for_our_locks()) {  // as in create_domain; counted as not kept
    refused_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const common::HeldHere lock(mu_);
  auto it = thread_names_.find(tid);
  if (it != thread_names_.end()) {  // renamed: the budget counts the longer of the two
    if (name.size() > it->second.size() && !take_budget_locked(name.size() - it->second.size()))
      return;
    it->second.assign(name);
    return;
  }
  if (!take_budget_locked(name.size() + kEntryOverhead)) return;
  thread_names_.emplace(tid, std::string(name));
}

void NameRegistry::refuse() {
  refused_.fetch_add(1, std::memory_order_relaxed);  // no lock: callable where none may be taken
}

uint64_t NameRegistry::refused() const {
  return refused_.load(std::memory_order_relaxed);
}

void NameRegistry::name_category(uint32_t domain_id, uint32_t category, std::string_view name) {
  name = bounded_name(name);
  if (cannot_wait_for_our_locks()) {  // as in create_domain; counted as not kept
    refused_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const common::HeldHere lock(mu_);
  const uint64_t key = uint64_t{domain_id} << 32 | category;
  auto it = category_names_.find(key);
  if (it != category_names_.end()) {  // renamed: the budget counts the difference
    if (name.size() > it->second.size()) {
      if (!take_budget_locked(name.size() - it->second.size())) return;
    } else {
      names_bytes_ -= std::min(names_bytes_, it->second.size() - name.size());
    }
    it->second.assign(name);
    return;
  }
  // The latest kMaxCategoryNames are kept; the oldest is forgotten first, and its bytes go
  // back to the budget.
  if (category_order_.size() >= kMaxCategoryNames) {
    auto oldest = category_names_.find(category_order_.front());
    names_bytes_ -= std::min(names_bytes_, oldest->second.size() + kEntryOverhead);
    category_names_.erase(oldest);
    category_order_.pop_front();
  }
  if (!take_budget_locked(name.size() + kEntryOverhead)) return;
  category_names_.emplace(key, name);
  category_order_.push_back(key);
}

std::map<std::pair<uint32_t, uint32_t>, std::string> NameRegistry::category_names() const {
  const common::HeldHere lock(mu_);
  std::map<std::pair<uint32_t, uint32_t>, std::string> out;
  for (const auto &[key, text] : category_names_)
    out.emplace(
        std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key)),
        text);
  return out;
}

std::vector<std::string> NameRegistry::domain_names() const {
  const common::HeldHere lock(mu_);
  return domain_names_;
}

bool NameRegistry::thread_name(uint32_t tid, std::string *name) const {
  const common::HeldHere lock(mu_);
  auto it = thread_names_.find(tid);
  if (it == thread_names_.end()) return false;
  *name = it->second;
  return true;
}

}  // namespace ferrum_replay::recorder
