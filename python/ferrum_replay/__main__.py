"""python -m ferrum_replay record -- python serve.py: the same as `ferrum-replay record ...`."""
import sys

from ferrum_replay._cli import main

sys.exit(main())
