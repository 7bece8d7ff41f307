// The naming scope (ferrum_replay_push_graph_name / _pop_graph_name): a per-thread stack of
// pending names. Every graph instantiated on a thread while a name is pushed there takes the
// innermost one as the program's own name (the rule: naming/graph_naming.hpp).
//
// Costs nothing at load and nothing to a thread that never pushes: the thread-local part is
// a depth and a pointer (initial-exec TLS, as t_calls); the names themselves live in one
// page mapped at the thread's first push and unmapped when the thread exits. Push and pop
// never activate the shim (they read no setting): a program may push before touching CUDA.
#pragma once

#include <stddef.h>

#include "ferrum_replay/ferrum_replay.h"

namespace ferrum_replay::shim {

// Names a thread can hold at once; deeper pushes are counted (so that pops balance) but
// carry no name of their own: the innermost name that fit stays in effect.
inline constexpr size_t kMaxScopeDepth = FERRUM_REPLAY_MAX_GRAPH_NAME_DEPTH;
// A scope's name is cut as a graph's name is (kMaxNameLength; launch_range.cpp checks that
// the two agree, without this unit depending on the registry's).
inline constexpr size_t kMaxScopeNameLength = 127;

// Pushes `name` (copied, made printable and cut as a graph's name is). Every push, whatever
// it returns, is balanced by one pop. Returns 0; -EINVAL for a null name (the level then
// carries the outer name); -ENOSPC beyond kMaxScopeDepth or when no page could be mapped
// (the level then carries the outer name).
int push_scope_name(const char *name);

// Pops the innermost level. 0, or -EINVAL when this thread has nothing pushed.
int pop_scope_name();

// The innermost name pushed on this thread, or null when none is. Valid until this thread
// pops or pushes.
const char *current_scope_name();

// Levels pushed on this thread (including those beyond kMaxScopeDepth): for tests.
size_t scope_depth();

}  // namespace ferrum_replay::shim
