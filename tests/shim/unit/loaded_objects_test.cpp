// The shim's lock-free reading of the loader's list (shim/resolve/libc_symbols.hpp,
// walk_loaded_objects) against the loader's own answer: every object dl_iterate_phdr visits, in
// its order (the caller's namespace: not one made with dlmopen) — the walk stands in for
// dl_iterate_phdr on the paths that may run in a fork child (F151–F153).
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <link.h>

#include <string>
#include <vector>

#include "resolve/libc_symbols.hpp"

using ferrum_replay::shim::LoadedObjects;
using ferrum_replay::shim::walk_loaded_objects;

namespace {

struct Seen {
  ElfW(Addr) base;
  std::string name;
  bool operator==(const Seen &) const = default;
};

std::vector<Seen> loader_answer() {
  std::vector<Seen> seen;
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        static_cast<std::vector<Seen> *>(data)->push_back(
            {info->dlpi_addr, info->dlpi_name ? info->dlpi_name : ""});
        return 0;
      },
      &seen);
  return seen;
}

std::vector<Seen> walked(LoadedObjects which, bool under_loader_lock = false) {
  std::vector<Seen> seen;
  walk_loaded_objects(
      which,
      [](const link_map *object, void *data) {
        static_cast<std::vector<Seen> *>(data)->push_back(
            {object->l_addr, object->l_name ? object->l_name : ""});
        return false;
      },
      &seen, under_loader_lock);
  return seen;
}

}  // namespace

TEST_CASE("the walk of every loaded object visits what dl_iterate_phdr visits, in its order") {
  const std::vector<Seen> expected = loader_answer();
  REQUIRE(expected.size() > 2);
  CHECK(walked(LoadedObjects::all) == expected);
  // The same walk inside dl_iterate_phdr, as the lock's holder (the loading process's way).
  CHECK(walked(LoadedObjects::all, true) == expected);
  // Linked into this program, "after the shim" is after the program, the first object.
  const std::vector<Seen> after = walked(LoadedObjects::after_shim);
  CHECK(after == std::vector<Seen>(expected.begin() + 1, expected.end()));
}

TEST_CASE("the walk stops where its visitor says so") {
  int visited = 0;
  walk_loaded_objects(
      LoadedObjects::all,
      [](const link_map *, void *count) { return ++*static_cast<int *>(count) == 2; }, &visited);
  CHECK(visited == 2);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("a second namespace (dlmopen) is left out, as dl_iterate_phdr leaves it") {
  const std::vector<Seen> before = loader_answer();
  void *other = dlmopen(LM_ID_NEWLM, "libm.so.6", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(other != nullptr);
  CHECK(loader_answer() == before);
  CHECK(walked(LoadedObjects::all) == before);
  dlclose(other);
}
#endif
