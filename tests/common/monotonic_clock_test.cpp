// The bounds of every wait the shim and the recorder make (common/monotonic_clock.hpp, and
// try_lock_within in common/held_here.hpp, built on it): an absolute time a condition variable
// on CLOCK_MONOTONIC wakes at, a polling bound, a try-lock that gives up. Each is checked the way
// a wait uses it: it ends, and not before its time.
#include <doctest/doctest.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <future>
#include <mutex>
#include <thread>

#include "held_here.hpp"
#include "monotonic_clock.hpp"

using namespace ferrum_replay::common;

namespace {

void sleep_ms(long ms) {
  const timespec pause{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&pause, nullptr);
}

}  // namespace

TEST_CASE("monotonic_after_ms is a valid time `ms` from now, on CLOCK_MONOTONIC") {
  for (long ms : {0L, 1L, 999L, 1000L, 1500L, 123456L}) {
    const uint64_t before = monotonic_ns();
    const timespec until = monotonic_after_ms(ms);
    const uint64_t after = monotonic_ns();
    CHECK(until.tv_nsec >= 0);
    CHECK(until.tv_nsec < 1000000000L);  // pthread_cond_timedwait refuses anything else (EINVAL)
    const uint64_t at =
        static_cast<uint64_t>(until.tv_sec) * 1000000000u + static_cast<uint64_t>(until.tv_nsec);
    CHECK(at >= before + static_cast<uint64_t>(ms) * 1000000u);
    CHECK(at <= after + static_cast<uint64_t>(ms) * 1000000u);
  }
  const timespec past = monotonic_after_ms(-5);  // a negative bound is no bound: now
  CHECK(static_cast<uint64_t>(past.tv_sec) * 1000000000u + static_cast<uint64_t>(past.tv_nsec) <=
        monotonic_ns());
}

TEST_CASE(
    "a condition variable on CLOCK_MONOTONIC waits until monotonic_after_ms, then times out") {
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_t cond;
  pthread_cond_init(&cond, &attributes);
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mutex);
  const uint64_t start = monotonic_ns();
  const timespec until = monotonic_after_ms(30);
  int result = 0;
  while ((result = pthread_cond_timedwait(&cond, &mutex, &until)) == 0) {
  }
  const uint64_t waited_ms = (monotonic_ns() - start) / 1000000u;
  pthread_mutex_unlock(&mutex);
  CHECK(result == ETIMEDOUT);
  CHECK(waited_ms >= 30);
  CHECK(waited_ms < 60000);
  pthread_cond_destroy(&cond);
  pthread_condattr_destroy(&attributes);
}

TEST_CASE("a MonotonicBound passes at its time, not before") {
  CHECK(MonotonicBound(0).passed());
  CHECK(MonotonicBound(-1).passed());
  CHECK_FALSE(MonotonicBound(60000).passed());  // (a minute: no preemption reaches it)
  const uint64_t start = monotonic_ns();
  const MonotonicBound bound(40);
  while (!bound.passed()) sleep_ms(1);
  CHECK((monotonic_ns() - start) / 1000000u >= 40);
}

TEST_CASE("try_lock_within takes a free mutex, and gives up on a held one after its bound") {
  std::mutex mutex;
  CHECK(try_lock_within(mutex, 0));
  mutex.unlock();
  std::promise<void> taken, done;
  std::thread holder([&] {
    const std::lock_guard<std::mutex> held(mutex);
    taken.set_value();
    done.get_future().wait();
  });
  taken.get_future().wait();
  const uint64_t start = monotonic_ns();
  CHECK_FALSE(try_lock_within(mutex, 30));  // held by another thread throughout
  const uint64_t waited_ms = (monotonic_ns() - start) / 1000000u;
  CHECK(waited_ms >= 30);
  CHECK(waited_ms < 60000);
  done.set_value();
  holder.join();
  CHECK(try_lock_within(mutex, 30));
  mutex.unlock();
}
