"""The `ferrum-replay` command of the Python package (and `python -m ferrum_replay`): runs the
wrapper script the package carries (ferrum_replay/bin/ferrum-replay, which finds the shim and
the recorder in ferrum_replay/lib/), with the same arguments, exit codes and output as the
script itself. From a source checkout (the module imported from python/), the checkout's
scripts/ferrum-replay."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def wrapper_path():
    """The wrapper script this package runs, or None when there is none."""
    for candidate in (os.path.join(_HERE, "bin", "ferrum-replay"),
                      os.path.join(_HERE, "..", "..", "scripts", "ferrum-replay")):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    wrapper = wrapper_path()
    if wrapper is None:
        print(f"ferrum-replay: the wrapper script is missing from {_HERE}/bin: reinstall the "
              "package (pip install ferrum-replay)", file=sys.stderr)
        return 2
    # A stream the caller closed (`>&-`) is None here: nothing to flush, and the wrapper runs
    # with that descriptor closed, as the sh command would.
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
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
