// FERRUM_STANDIN_DIRTY_ERRNO=1: every driver function of the stand-in leaves errno set to a value
// of its own when it returns — a driver that promises nothing about errno, at its worst. After a
// program's call, errno then names the last driver function that ran: the program's own (whose
// errno an interposer must pass through) or one the shim called on its own before returning
// (which must not show). With 2, the graph launches leave errno alone: what the program set
// before its launch must then still be there (nothing the shim called before the real launch
// may show either). Shared by the stand-in (cuda_driver_standin.cpp) and the programs that
// check it (tests/reliability/fault_program.cpp, mode errno-passes).
#pragma once

// The errno a function of the stand-in leaves, by its internal name ("i_cuGraphLaunch"):
// 64-bit FNV-1a, mapped to 10000..39988 (no errno the C library uses). The modulus, a prime, gave
// each of the 87 functions the stand-in had when it was chosen a value of its own; a test asserts
// it for the functions it tells apart (standin_errnos_distinct).
constexpr int standin_errno_of(const char *internal_name) {
  unsigned long long hash = 1469598103934665603ull;
  for (const char *p = internal_name; *p; ++p)
    hash = (hash ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return 10000 + static_cast<int>(hash % 29989);
}

// Whether the functions named have values of their own (what a test tells apart).
template <typename... Names>
constexpr bool standin_errnos_distinct(Names... names) {
  const char *list[] = {names...};
  for (const char *a : list)
    for (const char *b : list)
      if (a != b && standin_errno_of(a) == standin_errno_of(b)) return false;
  return true;
}
