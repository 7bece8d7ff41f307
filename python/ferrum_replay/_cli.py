"""The `ferrum-replay` command of the Python package (and `python -m ferrum_replay`): runs the
wrapper script the package carries (ferrum_replay/bin/ferrum-replay, which finds the shim and
the recorder in ferrum_replay/lib/), with the same arguments, exit codes and output as the
script itself. From a source checkout (the module imported from python/), the checkout's
scripts/ferrum-replay."""
import os
import signal
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def wrapper_path():
    """The wrapper script this package runs, or None when there is none."""
    for candidate in (os.path.join(_HERE, "bin", "ferrum-replay"),
                      os.path.join(_HERE, "..", "..", "scripts", "ferrum-replay")):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None


# The signals Python itself sets to SIG_IGN at start-up (Python/pylifecycle.c, as subprocess's
# restore_signals lists them).
IGNORED_BY_PYTHON = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")


def restore_default_signals():
    for name in IGNORED_BY_PYTHON:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)


# What Python's C-locale coercion (PEP 538) puts in LC_CTYPE at start-up, when LC_ALL is unset
# and LC_CTYPE resolves to the C locale (LANG=C, or no locale variable at all).
COERCED_LOCALES = (b"C.UTF-8", b"C.utf8", b"UTF-8")


def starting_environment(path="/proc/self/environ"):
    """The environment this process was started with ({name: value}, bytes; the first of a
    name given twice, as getenv reads it), or None where it cannot be read. The kernel keeps
    it where execve put it: setenv (Python's start-up included) leaves it as it was."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    started = {}
    for entry in data.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals and name not in started:
            started[name] = value
    return started


def undo_locale_coercion():
    """Gives LC_CTYPE back the value the command was started with (or none), where Python's
    C-locale coercion replaced it: the program gets the locale its caller gave (under LANG=C,
    `printf 'été' | wc -m` counts bytes, 6, not the 4 characters of C.UTF-8)."""
    started = starting_environment()
    now = os.environb.get(b"LC_CTYPE")
    if started is None or now not in COERCED_LOCALES or started.get(b"LC_CTYPE") == now:
        return
    if b"LC_CTYPE" in started:
        os.environb[b"LC_CTYPE"] = started[b"LC_CTYPE"]
    else:
        del os.environb[b"LC_CTYPE"]


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    wrapper = wrapper_path()
    if wrapper is None:
        # (Not "pip install ferrum-replay": the package is installed from its checkout, and a
        # name on PyPI that is not ours must never be what a message tells people to install.)
        print(f"ferrum-replay: the wrapper script is missing from {_HERE}/bin: reinstall the "
              "package (pip install . in ferrum-replay's checkout)", file=sys.stderr)
        return 2
    # A stream the caller closed (`>&-`) is None here: nothing to flush, and the wrapper runs
    # with that descriptor closed, as the sh command would.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    # Python ignores SIGPIPE and SIGXFSZ from its start (SIGXFZ where there is one), and an
    # ignored signal stays ignored across exec: the wrapper and the program would inherit it
    # (`python -m ferrum_replay run -- yes | head -1` ended with "Broken pipe" and status 1, not
    # by SIGPIPE, 141, as under the sh wrapper; a write beyond `ulimit -f` failed with EFBIG
    # rather than ending the program). Back to the defaults a shell starts a program with, as
    # subprocess's restore_signals does.
    restore_default_signals()
    # The same for the environment: the wrapper and the program get the caller's own.
    undo_locale_coercion()
    # The wrapper's helpers (summary, check, compare, merge, record's output checks) need a
    # Python 3.7 or newer, which it looked for as python3 in PATH: none there, or an old one,
    # and the package's own commands failed though a good Python started them. This one is
    # handed on; the wrapper prefers it where it runs and unsets it, so that the program never
    # sees it.
    if sys.executable:
        os.environ["FERRUM_REPLAY_PYTHON"] = sys.executable
    # Replaces this process: the wrapper's exit code and signals are the command's own.
    # Through sh, so that a wheel's unpacking need not have kept the execute bit.
    try:
        os.execv("/bin/sh", ["/bin/sh", wrapper, *args])
    except OSError as error:
        print(f"ferrum-replay: cannot run {wrapper}: {error}", file=sys.stderr)
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
