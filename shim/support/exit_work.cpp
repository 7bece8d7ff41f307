#include "support/exit_work.hpp"

#include <stdlib.h>

#include <atomic>

#include "own_process.hpp"
#include "support/loading_process.hpp"

namespace ferrum_replay::shim {
namespace {

std::atomic<void (*)()> g_work[static_cast<unsigned>(ExitWork::count)];

// 0: not registered; 1: being registered (by one thread); 2: registered; 3: not registered,
// never will be (atexit failed for want of memory, or a fork child): finish_exit_work does it.
std::atomic<int> g_state{0};

void run_exit_work() {
  // Only in the process whose state this is (own_process.hpp), before any slot is touched: a
  // vfork() child that calls exit() (after a failed exec) shares its parent's memory, and the
  // work it took from the slots never ran in the parent — no GPU last pass, no settled call, no
  // launch summary; its running marker stayed (F162). A fork() child owns its copy and runs it.
  if (!common::state_is_this_process()) return;
  for (auto &work : g_work)
    if (void (*const run)() = work.exchange(nullptr, std::memory_order_acq_rel)) run();
}

}  // namespace

void run_at_exit(ExitWork slot, void (*work)()) {
  g_work[static_cast<unsigned>(slot)].store(work, std::memory_order_release);
  int expected = 0;
  if (!g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  // A child made by fork (or by clone, _Fork) — its pid is not the loader's — registers nothing.
  const bool registered = in_loading_process() && atexit(run_exit_work) == 0;
  g_state.store(registered ? 2 : 3, std::memory_order_release);
}

void finish_exit_work() {
  run_exit_work();
}

}  // namespace ferrum_replay::shim
