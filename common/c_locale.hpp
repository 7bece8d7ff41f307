// Numbers in what we write read the same whatever locale the program chose. printf formats
// the decimal point by the calling thread's locale, and a program may
// have called setlocale(LC_ALL, "") under, say, de_DE: the launch summary's GPU columns then
// read "0,051", and `check` and `ci-smoke-profile` found no row in them; a JSON "2,5" is no
// number at all. One rule: each stretch of ours that formats output for exit holds a
// CLocaleScope, which gives the calling thread the C locale (uselocale: this thread only, no
// other thread of the program sees it) and gives back the program's after. The C locale object
// comes from newlocale, which hands out glibc's static one for "C" — no lock taken, nothing
// allocated, and freelocale of it returns at once (glibc's newlocale.c; seen in a fork child
// whose parent's thread held the locale lock: `fault fork_while_locale_busy`); if it cannot be
// had the program's locale stays (the numbers as before, nothing worse). Not the errno texts:
// strerror translates them under the locale lock in the C locale too (error_text.hpp).
#pragma once

#include <locale.h>

namespace ferrum_replay::common {

class CLocaleScope {
 public:
  CLocaleScope() {
    c_ = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
    if (c_) saved_ = uselocale(c_);
  }
  ~CLocaleScope() {
    if (!c_) return;
    uselocale(saved_);
    freelocale(c_);
  }
  CLocaleScope(const CLocaleScope &) = delete;
  CLocaleScope &operator=(const CLocaleScope &) = delete;

 private:
  locale_t c_ = static_cast<locale_t>(0);
  locale_t saved_ = static_cast<locale_t>(0);
};

}  // namespace ferrum_replay::common
