"""python -m ferrum_replay record -- python serve.py: the same as `ferrum-replay record ...`."""
import sys

from ferrum_replay._cli import main

# Only when run as `python -m ferrum_replay`: a module scanner that imports every submodule
# (pkgutil, pydoc) replaced the host process with the wrapper, run on the host's argv (review JJ3).
if __name__ == "__main__":
    sys.exit(main())
