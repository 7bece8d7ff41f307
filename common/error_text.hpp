// The text of an errno value in our messages ("No such file or directory"), read without a lock.
// glibc's strerror (strerror_r, strerror_l, perror, %m, std::system_error's what()) translates
// its text through gettext, which read-locks the C library's locale lock — even in the C locale
// of c_locale.hpp — and setlocale() holds that lock for writing while it loads a locale. glibc
// does not reset it in a fork child: a child forked while a thread of the program was inside
// setlocale() waited for ever in the first strerror of ours — at exit, when the launch summary
// or the trace could not be written (F154). One rule for the shim, the recorder and common/:
// every errno text goes through error_text(); no other C library call that translates
// (tests/imports_check.py keeps the libraries from importing one).
#pragma once

namespace ferrum_replay::common {

// The C locale's text of `errnum` (what strerror prints untranslated), from glibc's table
// (strerrordesc_np, glibc 2.32 and later: no lock, no allocation); "error N" where the C library
// has no such table or no text for the number. Never null; static storage.
const char *error_text(int errnum);

}  // namespace ferrum_replay::common
