#!/usr/bin/env python3
"""The shim and the recorder call no C library function that translates a message.

glibc translates strerror's text (and perror's, strsignal's, err/warn's, %m's, dlerror's)
through gettext, which read-locks the C library's locale lock, held for writing by setlocale()
while it loads a locale; fork() does not reset it, so such a call of ours in a fork child
waited for ever when the parent had a thread in setlocale() at the fork (F154). Errno texts come
from common/error_text.hpp. Checked against the built libraries' imports (`nm -D
--undefined-only`): a new strerror, perror or error_code message fails here, not in a hung
child. (%m in a format string cannot be seen here: error_text.hpp's comment forbids it.)

  tests/imports_check.py LIBRARY...
"""
import subprocess
import sys

TRANSLATING = {
    "strerror", "strerror_r", "__xpg_strerror_r", "strerror_l", "perror", "strsignal",
    "psignal", "psiginfo", "err", "errx", "warn", "warnx", "verr", "verrx", "vwarn", "vwarnx",
    "error", "error_at_line", "gettext", "dgettext", "dcgettext", "ngettext", "dngettext",
    "dcngettext", "setlocale",
    # libstdc++: an error_code's message() is strerror's text. (std::__throw_system_error is
    # imported by std::mutex::lock, for a pthread_mutex_lock that fails — never, for the
    # recorder's plain mutexes — and is not listed.)
    "_ZNKSt3_V214error_category10_M_messageB5cxx11Ei",
}
# dlerror too: with an error pending it formats the message through gettext.
# common/loader_error.hpp clears our errors with a lookup that succeeds instead (F154).
TRANSLATING.add("dlerror")


def imports(library):
    out = subprocess.run(["nm", "-D", "--undefined-only", library], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def main(libraries):
    ok = True
    for library in libraries:
        found = sorted(imports(library) & TRANSLATING)
        if found:
            print(f"imports: {library} calls {found}: a translated message takes the C "
                  "library's locale lock (use common/error_text.hpp)")
            ok = False
    print("imports: " + ("no translating call" if ok else "TRANSLATING CALLS FOUND")
          + f" in {len(libraries)} libraries")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
