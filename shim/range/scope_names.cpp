#include "range/scope_names.hpp"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "errno_kept.hpp"
#include "text_rules.hpp"
#include "zeroed_memory.hpp"

namespace ferrum_replay::shim {
namespace {

struct ScopeNames {
  // names[i] holds level i's name; "" where the level carries none of its own (a null name).
  char names[kMaxScopeDepth][kMaxScopeNameLength + 1];
};

struct ThreadScope {
  size_t depth;       // levels pushed, also beyond kMaxScopeDepth
  ScopeNames *names;  // mapped at the first push, null before
};
constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadScope t_scope{};

pthread_key_t g_key;
bool g_key_made = false;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

// At a thread's exit (pthread key destructor): the page goes back.
void release_names(void *names) {
  common::unmap_zeroed(names, sizeof(ScopeNames));
  t_scope.names = nullptr;
  t_scope.depth = 0;
}

void make_key() {
  g_key_made = pthread_key_create(&g_key, release_names) == 0;
}

ScopeNames *thread_names() {
  ThreadScope &scope = t_scope;
  if (scope.names) return scope.names;
  pthread_once(&g_key_once, make_key);
  if (!g_key_made) return nullptr;  // could not be released at exit: no names rather than a leak
  void *page = common::map_zeroed(sizeof(ScopeNames));
  if (!page) return nullptr;
  if (pthread_setspecific(g_key, page) != 0) {
    common::unmap_zeroed(page, sizeof(ScopeNames));
    return nullptr;
  }
  scope.names = static_cast<ScopeNames *>(page);
  return scope.names;
}

}  // namespace

int push_scope_name(const char *name) {
  ThreadScope &scope = t_scope;
  const size_t level = scope.depth++;
  if (level >= kMaxScopeDepth) return -ENOSPC;
  const common::ErrnoKept errno_kept;  // errno_kept.hpp: the thread's first page of names
  ScopeNames *names = thread_names();
  if (!names) return -ENOSPC;  // the level carries no name; the outer one, if any, applies
  char *slot = names->names[level];
  if (!name) {
    slot[0] = '\0';
    return -EINVAL;
  }
  common::printable_copy(name, slot, sizeof names->names[level]);
  if (!slot[0]) common::printable_copy("?", slot, sizeof names->names[level]);  // as a graph's
  return 0;
}

int pop_scope_name() {
  ThreadScope &scope = t_scope;
  if (scope.depth == 0) return -EINVAL;
  --scope.depth;
  return 0;
}

const char *current_scope_name() {
  const ThreadScope &scope = t_scope;
  if (!scope.names) return nullptr;
  for (size_t level = scope.depth < kMaxScopeDepth ? scope.depth : kMaxScopeDepth; level > 0;
       --level)
    if (scope.names->names[level - 1][0]) return scope.names->names[level - 1];
  return nullptr;
}

size_t scope_depth() {
  return t_scope.depth;
}

}  // namespace ferrum_replay::shim
