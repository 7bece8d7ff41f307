// The stock of pre-faulted chunk mappings (recorder/chunk_stock.hpp): what it hands out, the
// thread that refills it, and a fork() child, where that thread does not exist.
#include <dirent.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "chunk_stock.hpp"
#include "thread_buffer.hpp"

using namespace ferrum_replay::recorder;

namespace {

// A mapping from the stock, waiting up to 10 s for its thread to fill it.
void *take_within_10s(size_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (void *memory = take_populated(bytes)) return memory;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return nullptr;
}

// The "SigBlk:" mask of the process's thread named `name`, or an empty string.
std::string blocked_signals_of(const char *name) {
  DIR *tasks = opendir("/proc/self/task");
  REQUIRE(tasks != nullptr);
  std::string mask;
  while (const dirent *entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + entry->d_name;
    std::string comm;
    std::getline(std::ifstream(dir + "/comm"), comm);
    if (comm != name) continue;
    std::ifstream status(dir + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0) mask = line.substr(7);
  }
  closedir(tasks);
  return mask;
}

bool blocks(const std::string &mask, int signal) {
  const unsigned long long bits = std::stoull(mask, nullptr, 16);
  return (bits >> (signal - 1)) & 1;
}

}  // namespace

TEST_CASE("the stock hands out zero-filled mappings that its own thread faulted in") {
  const size_t bytes = ThreadBuffer::chunk_bytes();
  for (int i = 0; i < 3 * kStockChunks; ++i) {  // more than it holds: it is refilled
    auto *memory = static_cast<unsigned char *>(take_within_10s(bytes));
    REQUIRE(memory != nullptr);
    // Faulted in already: every page resident before this thread touches it.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::string residency((bytes + page - 1) / page, '\0');
    REQUIRE(mincore(memory, bytes, reinterpret_cast<unsigned char *>(residency.data())) == 0);
    for (const char resident : residency) CHECK((resident & 1) == 1);
    bool zero = true;
    for (size_t k = 0; k < bytes; ++k) zero = zero && memory[k] == 0;
    CHECK(zero);
    std::memset(memory, 0xab, bytes);  // writable
    munmap(memory, bytes);
  }
  CHECK(chunk_stock_running());
  // Its thread leaves every signal to the program's threads.
  const std::string mask = blocked_signals_of("ferrum-rec-mem");
  REQUIRE_FALSE(mask.empty());
  for (const int signal : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM, SIGPIPE})
    CHECK(blocks(mask, signal));
  // Mappings of another size are never handed out.
  CHECK(take_populated(bytes + 4096) == nullptr);
}

TEST_CASE("in a fork child the stock hands out what it held, then nothing, without a thread") {
  const size_t bytes = ThreadBuffer::chunk_bytes();
  munmap(take_within_10s(bytes), bytes);  // the thread runs
  // Let it fill the stock before the fork.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(20);  // a hang fails the test instead of stalling it
    int handed = 0;
    for (int i = 0; i < 4 * kStockChunks; ++i) {
      auto *memory = static_cast<unsigned char *>(take_populated(bytes));
      if (!memory) continue;
      ++handed;
      if (memory[0] != 0 || memory[bytes - 1] != 0) _exit(3);
      std::memset(memory, 1, bytes);
      munmap(memory, bytes);
    }
    // At most what the stock held at the fork: nothing refills it here.
    _exit(handed <= kStockChunks && !chunk_stock_running() ? 0 : 4);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(chunk_stock_running());  // the parent's thread is untouched
}
