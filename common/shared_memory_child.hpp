// A child that shares its parent's memory — vfork(), clone(CLONE_VM) — and calls exit().
//
// A vfork() child may only exec or _exit; exit() after a failed exec is the textbook slip, and
// harmless-looking without us. But exit() consumes the C library's exit state in the memory it
// shares with its parent: the atexit list (each entry run and removed), the loaded objects'
// "initialised" marks (_dl_fini clears each as it runs its destructors). The parent's own exit()
// then ran no exit handler and no destructor at all: the recorder wrote no trace and no table, the
// shim no launch summary, its running marker stayed, and ci-smoke-profile failed a correct run
// (F162). (Checked: a plain library's destructor and atexit handler run in the child and never
// in the parent, without any code of ours.) So a process that owns our state ends such a child
// at the first exit handler of ours it reaches, with _exit(status) — what it should have called —
// before the C library consumes what comes after; and every exit hook of ours checks first that
// the state is this process's (own_process.hpp) and changes nothing otherwise.
//
// Told apart from a child with a copy of memory (_Fork, clone without CLONE_VM: its exit must run
// as usual, its stdio flushed) by kcmp(KCMP_VM) against the process that owns the state. Where
// kcmp is not allowed (a seccomp filter, a kernel without it), nothing is done: such a child's
// exit() still leaves its parent without its report.
#pragma once

#include <linux/kcmp.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "own_process.hpp"

namespace ferrum_replay::common {

// True in a process that shares the memory of the process that owns our state, and is not it.
inline bool shares_owners_memory() {
  const pid_t owner = own_process_detail::g_pid.load(std::memory_order_relaxed);
  const pid_t self = getpid();
  if (owner <= 0 || owner == self) return false;
  // A vfork() child's parent is the owner. Without this, a child of a fork without handlers
  // (_Fork, clone) whose owner's pid number now names one of its own threads — the owner gone
  // and the number reused, or the child in a new pid namespace — compared its memory with its
  // own and was ended before its output was flushed (review T).
  if (getppid() != owner) return false;
  return syscall(SYS_kcmp, self, owner, KCMP_VM, 0, 0) == 0;
}

namespace shared_memory_child_detail {
inline void end_shared_memory_child(int status, void *) {
  if (shares_owners_memory()) _exit(status);
}
}  // namespace shared_memory_child_detail

// Registers the exit handler that ends such a child (on_exit: it is handed exit()'s status).
// It runs before the handlers registered earlier and before every ELF destructor: call it only
// where registering an exit handler cannot wait for ever (not in a fork child: exit_work.hpp).
// False if the C library had no room for it.
inline bool end_shared_memory_children_at_exit() {
  return on_exit(shared_memory_child_detail::end_shared_memory_child, nullptr) == 0;
}

}  // namespace ferrum_replay::common
