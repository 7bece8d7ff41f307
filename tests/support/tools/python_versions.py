"""Other Python interpreters on this machine, for tests that must hold on the Python versions a
user's environment may put first: on PATH as python3.X, or under pyenv's versions/."""
import glob
import os
import shutil
import subprocess


def python3_among(minors):
    """A python3 of one of these 3.x minor versions on this machine (as a project's virtual
    environment may put first in PATH), or None."""
    candidates = [shutil.which(f"python3.{minor}") for minor in minors]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for minor in minors:
        candidates += sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin",
                                                    "python3")))
    for candidate in filter(None, candidates):
        try:
            said = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        if said.strip() in {f"(3, {minor})" for minor in minors}:
            return candidate
    return None
