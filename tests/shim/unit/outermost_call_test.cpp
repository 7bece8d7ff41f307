// The per-thread guard that keeps nested intercepted calls to one range (launch_range.hpp):
// nested calls pass through, and a call left by siglongjmp is noticed and closed at the
// thread's next call — from above, from the same depth or from deeper in the stack.
#include <doctest/doctest.h>

#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include <thread>
#include <vector>

#include "range/launch_range.hpp"

namespace {

sigjmp_buf g_jump;

bool open_call() {
  return ferrum_replay::shim::t_calls.open != nullptr;
}

// Claims the guard, marks a push as owed, and leaves without running any destructor.
FERRUM_REAL_STACK_FRAME __attribute__((noinline)) void abandon_a_call() {
  ferrum_replay::shim::OutermostCall call;
  REQUIRE(call.claimed());
  ferrum_replay::shim::t_calls.pop_domain =
      nullptr;  // no tool in this process: NVTX ignores the pop
  ferrum_replay::shim::t_calls.pop_pending = true;
  siglongjmp(g_jump, 1);
}

void abandon() {
  if (sigsetjmp(g_jump, 1) == 0) abandon_a_call();
  REQUIRE(open_call());  // the guard is still held by the dead frame
}

FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool claim_here() {
  ferrum_replay::shim::OutermostCall call;
  return call.claimed();
}

// A claim `depth` frames deeper, each frame writing its whole buffer (the stack is reused).
FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool claim_deeper(int depth) {
  volatile char scribble[512];
  memset(const_cast<char *>(scribble), 0x5a, sizeof scribble);
  const bool claimed = depth == 0 ? claim_here() : claim_deeper(depth - 1);
  return claimed && scribble[0] == 0x5a;
}

// What a launch's frameless entry decides (launch_through()) from `depth` frames deeper.
FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool entry_sees_nested(int depth) {
  volatile char scribble[512];
  memset(const_cast<char *>(scribble), 0x5a, sizeof scribble);
  if (depth > 0) return entry_sees_nested(depth - 1) && scribble[0] == 0x5a;
  return open_call() &&
         ferrum_replay::shim::nested_in_open_call(ferrum_replay::shim::stack_pointer());
}

FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool entry_nested_inside() {
  ferrum_replay::shim::OutermostCall outer;
  REQUIRE(outer.claimed());
  return entry_sees_nested(2);
}

FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool nested_claim_inside() {
  ferrum_replay::shim::OutermostCall outer;
  REQUIRE(outer.claimed());
  return claim_deeper(2);  // the runtime's launch reaching the driver's underneath
}

// The test body itself calls from above the abandoned call's frame.
FERRUM_REAL_STACK_FRAME bool claim_from_above() {
  ferrum_replay::shim::OutermostCall call;
  return call.claimed();
}

bool g_claimed_in_handler = true;
void handler_claims(int) {
  g_claimed_in_handler = claim_here();
}

// True when the handler ran (on the alternate stack) while the call stayed open.
FERRUM_REAL_STACK_FRAME __attribute__((noinline)) bool signal_inside_open_call() {
  ferrum_replay::shim::OutermostCall open;
  if (!open.claimed()) return false;
  raise(SIGUSR2);
  return open_call();  // still the open call's
}

}  // namespace

TEST_CASE("a call nested in an open call passes through; the guard is free afterwards") {
  CHECK_FALSE(nested_claim_inside());
  CHECK(!open_call());
  CHECK(claim_here());
}

TEST_CASE("a launch's entry passes a nested call through where the guard would, and no other") {
  CHECK(entry_nested_inside());
  CHECK(!open_call());
  CHECK_FALSE(entry_sees_nested(2));  // nothing open
  // A call left by siglongjmp: not nested from above, nor from deeper once its frame's stack was
  // reused — the guard then closes it (the entry leaves that to it).
  abandon();
  CHECK_FALSE(entry_sees_nested(0));
  CHECK_FALSE(entry_sees_nested(8));
  CHECK(open_call());
  CHECK(claim_here());
  CHECK(!open_call());
}

TEST_CASE("an abandoned call's marker rewritten by another thread's call is not taken as open") {
  // A stack passed between threads (pooled fiber stacks): another thread's call claims at the
  // very address of this thread's abandoned marker and writes its own value there. The marker
  // stands in a live frame here (a dead one's is overwritten by any call, a sanitizer's too).
  volatile uintptr_t marker = 0;
  const volatile uintptr_t *const address = &marker;
  uintptr_t foreign = 0;
  std::thread([&] { foreign = ferrum_replay::shim::marker_value(address); }).join();
  const uintptr_t deeper = reinterpret_cast<uintptr_t>(address) - 64;  // a nested call's frame
  REQUIRE(!open_call());
  ferrum_replay::shim::t_calls.open = address;  // as the abandoned call left it
  marker = ferrum_replay::shim::marker_value(address);
  CHECK(ferrum_replay::shim::nested_in_open_call(deeper));
  marker = foreign;
  CHECK_FALSE(ferrum_replay::shim::nested_in_open_call(deeper));
  ferrum_replay::shim::t_calls.open = nullptr;
}

TEST_CASE("a call left by siglongjmp is closed at the next call, from any depth") {
  const unsigned long long before = ferrum_replay::shim::abandoned_calls();
  // From the same depth and from above: the dead frame is not above this one.
  abandon();
  CHECK(claim_here());
  CHECK_FALSE(ferrum_replay::shim::t_calls.pop_pending);  // the owed pop was issued
  CHECK(!open_call());
  abandon();
  CHECK(claim_from_above());
  // From deeper, after the dead frame's stack was reused: its marker no longer holds its value.
  abandon();
  CHECK(claim_deeper(8));
  CHECK(ferrum_replay::shim::abandoned_calls() == before + 3);
  CHECK(!open_call());
}

TEST_CASE("a signal handler on the alternate stack, inside an open call, is nested in it") {
  std::vector<char> stack(64 * 1024);
  stack_t alternate{};
  alternate.ss_sp = stack.data();
  alternate.ss_size = stack.size();
  REQUIRE(sigaltstack(&alternate, nullptr) == 0);
  struct sigaction action {
  }, previous{};
  action.sa_handler = handler_claims;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  REQUIRE(sigaction(SIGUSR2, &action, &previous) == 0);
  const unsigned long long before = ferrum_replay::shim::abandoned_calls();
  CHECK(signal_inside_open_call());
  CHECK_FALSE(g_claimed_in_handler);
  CHECK(ferrum_replay::shim::abandoned_calls() == before);
  CHECK(!open_call());
  sigaction(SIGUSR2, &previous, nullptr);
  alternate.ss_flags = SS_DISABLE;
  sigaltstack(&alternate, nullptr);
}
