// Where every setting of ours comes from: the environment the process was started with (what
// execve gave it), never the environment of the moment. One rule for the shim and the recorder
// (docs/settings.md, "When settings are read").
//
// Why: we read settings lazily, on a thread of the program's (the first launch, NVTX's
// initialisation, the first spill, the exit hooks' `%q{NAME}`), while other threads of the
// program may be changing the environment. glibc's setenv() reallocates (frees) the array
// getenv() walks, putenv() and unsetenv() move its entries, clearenv() frees it: a getenv()
// on another thread meanwhile reads freed memory (a crash once the array is large enough to
// be its own mapping), and a program that cleared or rewrote its environment before its first
// launch silently lost (or changed) the user's FERRUM_* requests. The start-up environment is
// read from /proc/self/environ, which only the kernel writes to us: a private copy, taken on
// first use (no cost at load, none for a process that never asks), never waiting on a thread.
// Where it cannot be read (no /proc: a chroot; a process that rewrote its start-up area to set
// its title, which leaves no `NAME=` entry there) the live environment is used, as before.
#pragma once

namespace ferrum_replay::common {

// The value of `name` in the start-up environment, or null when it is unset there. The string
// lives as long as the process (an exec replaces both).
const char *startup_env(const char *name);

// Calls `visit` with each `NAME=value` entry of the start-up environment, in order. Where that
// cannot be read, with none: the live environment is not walked (reading `environ` would bind
// that symbol at every start of the shim, and another thread's setenv() may free the array).
void each_startup_env_entry(void (*visit)(const char *entry, void *context), void *context);

// Tests only: look `name` up in `environment` (NUL-separated `NAME=value` entries, `size`
// bytes, as /proc/self/environ reads) — the parsing rule of startup_env().
const char *startup_env_lookup(const char *environment, unsigned long size, const char *name);

// Tests only: whether `environment` reads as an environment (see startup_env.cpp).
bool startup_env_plausible(const char *environment, unsigned long size);

}  // namespace ferrum_replay::common
