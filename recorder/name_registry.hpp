// Process-wide names: NVTX domains, registered strings, categories and thread names. These are
// created rarely (once per domain, per graph name, per thread), so a mutex is fine here; the
// per-range path only dereferences the handles handed out, which stay valid for the life of the
// process.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text_rules.hpp"

// NVTX only forward-declares these; each tool defines what its handles point to. They are defined
// here, outside any namespace, so that the handles NVTX passes back are ours without any cast.
struct nvtxDomainRegistration_st {
  uint32_t id;         // index into NameRegistry::domain_names(); 0 is the global domain
  bool reject_target;  // pushes in this domain are subject to FERRUM_RECORD_REJECT
};
struct nvtxStringRegistration_st {
  const char *text;  // NUL-terminated, never freed while the recorder lives
  size_t size;       // strlen(text), kept so that a range with this message measures nothing
};

namespace ferrum_replay::recorder {

// The name under which NVTX's global (NULL) domain appears in traces and tables.
inline constexpr std::string_view kGlobalDomainName = common::kGlobalDomainName;

class NameRegistry {
 public:
  // `reject_all`: every domain is a rejection target; otherwise only `reject_domain` is, when
  // given ("global" naming the NULL domain). Not given, no domain is: a domain named "" (or
  // nullptr) is no rejection target, whose push would ask a rejection mode that is none.
  NameRegistry(bool reject_all, std::optional<std::string> reject_domain);
  ~NameRegistry();
  NameRegistry(const NameRegistry &) = delete;
  NameRegistry &operator=(const NameRegistry &) = delete;

  const nvtxDomainRegistration_st &global_domain() const { return global_; }

  // Every name is cut to kMaxNameBytes (utf8.hpp). Names are kept until exit (ranges refer to
  // them, the trace lists them), so together they are bounded: kNamesBudget bytes, each name
  // counted with kEntryOverhead for its table entry (a program that made a new string, thread
  // or category name without end grew the recorder without bound). Beyond the budget a new
  // thread or category name is not kept (a thread's track keeps its own name), counted in
  // refused(); a new string is not found here: register_string returns nullptr and the caller
  // keeps it with the calling thread's names (Recorder::register_string: FERRUM_RECORD_MEMORY,
  // then spill blocks), since a handle may be used at any time and a renamed graph must keep
  // its last name. Domains count against the budget but are not refused for it: each handle
  // must stay itself (its own stacks and depths). Names already kept are still found.
  // Domains are bounded by their number instead: kMaxDomains distinct names get a handle each;
  // beyond, every new name gets one shared handle, listed as kMoreDomainsName (its ranges are
  // still recorded, their pushes and pops paired as one domain's). A program that created a
  // domain per request (and destroyed it: nvtxDomainDestroy cannot free a handle another
  // module may hold by the same name) grew the recorder by 300 bytes a domain: 1,000,000 of
  // them took 300 MB (review LL-3). keep_domain's name and the rejection target are exempt.
  // A call from a signal handler that interrupted this thread inside a lock of ours
  // (held_here.hpp) takes no lock: a null domain or string (what NVTX gives without a tool),
  // a name not kept.
  static constexpr size_t kNamesBudget = 16u << 20;
  static constexpr size_t kEntryOverhead = 192;
  // The same name always yields the same handle, as several modules (each with its own NVTX
  // state) may create "the same" domain and their ranges must land in one place.
  nvtxDomainRegistration_st *create_domain(std::string_view name);
  static constexpr size_t kMaxDomains = 4096;
  static constexpr std::string_view kMoreDomainsName = common::kMoreDomainsName;
  // Creates `name`'s domain now, exempt from kMaxDomains: the shim's, created before any of the
  // program's, has a low id (a thread's table of stacks is direct below ThreadBuffer's
  // kDirectStacks) and never shares a handle. Returns its id.
  uint32_t keep_domain(std::string_view name);
  // keep_domain's domain while no create_domain has asked for it (so none of its handles was
  // handed out: no range in it), else 0. A trace lists it only once asked for.
  uint32_t unasked_domain() const;
  // Whether a domain beyond kMaxDomains was made (the shared handle handed out): said at exit.
  bool domains_shared() const;
  // nullptr beyond the budget (above).
  nvtxStringRegistration_st *register_string(std::string_view text);
  void name_thread(uint32_t tid, std::string_view name);
  // Strings, thread and category names not kept for the budget (refuse(): one more).
  uint64_t refused() const;
  void refuse();
  // nvtxNameCategory (domain 0) and nvtxDomainNameCategory; a later name replaces an earlier one.
  // The shim names a category per graph, so a process that keeps re-instantiating graphs names
  // categories without end: the latest kMaxCategoryNames are kept (the oldest named is
  // forgotten first), and their names count against kNamesBudget.
  static constexpr size_t kMaxCategoryNames = 8192;
  void name_category(uint32_t domain_id, uint32_t category, std::string_view name);

  // Display names indexed by domain id; [0] is "global".
  std::vector<std::string> domain_names() const;
  // (domain id, category) -> name, for every category named so far.
  std::map<std::pair<uint32_t, uint32_t>, std::string> category_names() const;
  // Whether a thread was named through nvtxNameOsThread; fills `name` if so.
  bool thread_name(uint32_t tid, std::string *name) const;

  // Held across fork() so that the child never inherits a locked mutex.
  std::mutex &mutex() { return mu_; }

 private:
  // Whether `bytes` more fit the budget; counts them if so, else counts a refusal.
  bool take_budget_locked(size_t bytes);
  nvtxDomainRegistration_st *add_domain_locked(std::string key);

  struct StringEntry {
    nvtxStringRegistration_st handle;
    std::unique_ptr<char[]> storage;
  };

  bool reject_all_;
  std::optional<std::string> reject_domain_;
  nvtxDomainRegistration_st global_;

  mutable std::mutex mu_;
  std::vector<std::string> domain_names_;  // by id
  std::unordered_map<std::string, std::unique_ptr<nvtxDomainRegistration_st>> domains_;
  std::optional<std::string> kept_domain_;  // keep_domain's
  uint32_t kept_domain_id_ = 0;
  bool kept_domain_asked_ = false;                           // create_domain was called for it
  std::unique_ptr<nvtxDomainRegistration_st> more_domains_;  // the shared handle, once needed
  std::unordered_map<std::string, std::unique_ptr<StringEntry>> strings_;
  std::unordered_map<uint32_t, std::string> thread_names_;
  // (domain id << 32 | category) -> name; keys in the order first named.
  std::unordered_map<uint64_t, std::string> category_names_;
  std::deque<uint64_t> category_order_;
  size_t names_bytes_ = 0;  // what the budget counts so far
  std::atomic<uint64_t> refused_{0};
};

}  // namespace ferrum_replay::recorder
