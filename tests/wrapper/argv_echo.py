#!/usr/bin/env python3
"""argv_echo.py: a program for the wrapper's argument and exit-code tests.

Writes one JSON line to stdout: {"argv": [its arguments], "LD_PRELOAD": ..., "cwd": ...}.
ARGV_ECHO_EXIT=N makes it exit with N; ARGV_ECHO_SIGNAL=N makes it kill itself with signal N.
"""
import json
import os
import signal
import sys

print(json.dumps({"argv": sys.argv[1:], "LD_PRELOAD": os.environ.get("LD_PRELOAD"),
                  "NVTX_INJECTION64_PATH": os.environ.get("NVTX_INJECTION64_PATH"),
                  "cwd": os.getcwd()}), flush=True)
if os.environ.get("ARGV_ECHO_SIGNAL"):
    number = int(os.environ["ARGV_ECHO_SIGNAL"])
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
sys.exit(int(os.environ.get("ARGV_ECHO_EXIT", "0")))
