// Room on the stack (common/stack_room.hpp): how much is left on the main thread, on a thread
// with a small stack and on an alternate signal stack, and that work needing more than is left
// runs on a thread of its own instead of running off the end.
#include <doctest/doctest.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stack_room.hpp"

using ferrum_replay::common::run_with_stack_room;
using ferrum_replay::common::stack_room;

namespace {

struct Probe {
  size_t room = 0;
  long thread = 0;
};

void probe(void *out) {
  auto *p = static_cast<Probe *>(out);
  p->room = stack_room();
  p->thread = syscall(SYS_gettid);
}

// On a thread with a 64 KiB stack: the room it sees, and where 256 KiB of work runs.
struct SmallThread {
  size_t room = 0;
  size_t size = 0;  // its stack's size as the thread library reports it (sanitizers enlarge it)
  long self = 0;
  Probe delegated;
  Probe inline_run;
};

void *small_thread(void *arg) {
  auto *t = static_cast<SmallThread *>(arg);
  t->room = stack_room();
  t->self = syscall(SYS_gettid);
  pthread_attr_t attributes;
  void *lowest = nullptr;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    pthread_attr_getstack(&attributes, &lowest, &t->size);
    pthread_attr_destroy(&attributes);
  }
  CHECK(run_with_stack_room(probe, &t->delegated, 256 * 1024));
  CHECK(run_with_stack_room(probe, &t->inline_run, 8 * 1024));
  return nullptr;
}

volatile size_t g_handler_room = 0;
void on_signal(int) {
  g_handler_room = stack_room();
}

}  // namespace

TEST_CASE("a thread with a small stack sees its room, and big work runs elsewhere") {
  pthread_attr_t attributes;
  REQUIRE(pthread_attr_init(&attributes) == 0);
  REQUIRE(pthread_attr_setstacksize(&attributes, 64 * 1024) == 0);
  SmallThread t;
  pthread_t thread;
  REQUIRE(pthread_create(&thread, &attributes, small_thread, &t) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attributes);
  CHECK(t.room > 0);
  CHECK(t.room < t.size);
  CHECK(t.delegated.thread != t.self);  // on a thread of its own, with more room
  CHECK(t.delegated.room > t.room);
  CHECK(t.inline_run.thread == t.self);  // enough here: run in place
}

TEST_CASE("on an alternate signal stack the room is that stack's") {
  constexpr size_t kSize = 64 * 1024;
  stack_t alternate{};
  alternate.ss_sp = malloc(kSize);
  alternate.ss_size = kSize;
  REQUIRE(alternate.ss_sp != nullptr);
  stack_t old{};
  REQUIRE(sigaltstack(&alternate, &old) == 0);
  struct sigaction action {
  }, previous{};
  action.sa_handler = on_signal;
  action.sa_flags = SA_ONSTACK;
  REQUIRE(sigaction(SIGUSR2, &action, &previous) == 0);
  raise(SIGUSR2);
  sigaction(SIGUSR2, &previous, nullptr);
  sigaltstack(&old, nullptr);
  free(alternate.ss_sp);
  CHECK(g_handler_room > 0);
  CHECK(g_handler_room < kSize);
}

TEST_CASE("the main thread's room follows its stack limit") {
  Probe main_thread;
  probe(&main_thread);
  CHECK(main_thread.room > 64 * 1024);  // the test runs with the usual 8 MiB or more
}
