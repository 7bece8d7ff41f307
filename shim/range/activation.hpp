// One-time activation of the shim, on the first intercepted launch rather than at load time:
// a process that never touches CUDA (a shell, a compiler, Python) must not read settings,
// attach an NVTX tool, create threads or print anything.
#pragma once

#include <nvtx3/nvToolsExt.h>
#include <stdio.h>

#include <atomic>

#include "support/settings.hpp"

namespace ferrum_replay::shim {

namespace detail {
enum class Phase : unsigned char { untouched, activating, active, pass_through };
extern std::atomic<Phase> g_phase;
extern nvtxDomainHandle_t g_domain;  // written once, before g_phase becomes Phase::active
// wait_for_others false: true also while another thread activates (for a lookup's answer).
bool activate_slow(bool wait_for_others = true);
}  // namespace detail

// Where activation stands, without deciding: active, passing through for good, or not decided
// yet (then shim_active() decides). For a launch that keeps its first calls out of line, so
// that it needs no frame of its own.
enum class ShimState : unsigned char { active, passing_through, undecided };
inline ShimState shim_state() {
  const detail::Phase phase = detail::g_phase.load(std::memory_order_acquire);
  if (__builtin_expect(phase == detail::Phase::active, 1)) return ShimState::active;
  return phase == detail::Phase::pass_through ? ShimState::passing_through : ShimState::undecided;
}

// True when launches get ranges; false when there is nothing to do — FERRUM_REPLAY=off, or
// no NVTX tool attached and no summary asked for (ranges would go nowhere) — and while
// re-entered from the NVTX tool's own initialisation (which may call CUDA and must not wait
// for itself). Fast path: one acquire load and a branch, either way.
inline bool shim_active() {
  const ShimState state = shim_state();
  if (__builtin_expect(state == ShimState::active, 1)) return true;
  if (state == ShimState::passing_through) return false;
  return detail::activate_slow();
}

// For a lookup of a function the shim intercepts: whether to hand out our wrapper rather than
// the genuine function. As shim_active() decides, but never waiting for another thread's
// activation: while one is under way, the wrapper (it decides at each call, and costs a branch
// should the process pass through). The genuine function handed out then was never intercepted
// for the life of the process: the replays through it had no range, even once the tool was up.
inline bool wrap_lookups() {
  const ShimState state = shim_state();
  if (__builtin_expect(state == ShimState::active, 1)) return true;
  if (state == ShimState::passing_through) return false;
  return detail::activate_slow(/*wait_for_others=*/false);
}

// Whether another copy of the shim comes before this one and names the replays: this one then
// passes every launch through and times nothing (activation.cpp says how copies are told).
// Decided once, at the first call.
bool later_copy();

// The user's settings, read from the environment once, on first need (which is never in a
// process that does not use CUDA). Valid for the life of the process.
const Settings &settings();

// The C library's stdout, for a launch summary written to a stream at exit after the program's
// buffered output (common/host_stdout.hpp): where the `stdout` variable is (the program's own
// copy of it where it has one: dlsym's RTLD_DEFAULT answer, which the C library uses too) and
// the C library's own object. Looked up with the C library's dlsym at activation, where a
// summary is asked for: a data symbol bound at load would cost every process a lookup
// (tests/load_cost_check.py). Both null where not looked up or not found.
struct LibcStdout {
  FILE *const *variable;
  FILE *object;
};
LibcStdout libc_stdout();

// Our NVTX domain; null when no NVTX tool answered its creation (none is attached, or the one
// attached handles no domains): the shim then pushes no range (LaunchRange).
// Inline: read on every launch, after shim_active() has ordered it.
inline nvtxDomainHandle_t shim_domain() {
  return detail::g_domain;
}

}  // namespace ferrum_replay::shim
