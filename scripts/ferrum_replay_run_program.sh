# Running a program under a profiler's wrapper and passing signals on to it (and making the
# paths handed to it absolute). Sourced (with `.`)
# by ferrum-replay (record, nsys) and ferrum-replay-ci-smoke-profile, which find it where they
# find ferrum_replay_traces.py (ferrum-replay `helper`): beside the wrapper in a checkout,
# beside the libraries when installed. POSIX sh; defines functions only.

# Runs "$@" (a function that execs the program, run in a subshell of its own) and waits
# for it; sets status to its exit status (128+N when a signal N ended it). A TERM or HUP sent
# to the wrapper (docker stop, a batch scheduler, a closed terminal) is passed on to the
# program and the wrapper waits on, rather than dying and leaving it to run unwatched; so is an
# INT or QUIT, unless the wrapper is in its terminal's foreground process group, where it came
# from the keyboard and reached the program itself (it is not sent twice). The program runs
# in the background, as only `wait` lets a trap run before the child ends; sh starts a
# background child with INT and QUIT ignored and stdin on /dev/null, so its stdin is handed
# on, and signal_reset (GNU env --default-signal) restores the dispositions a foreground
# program has. Without it (coreutils before 8.31, busybox) the program runs in the foreground
# as before: a signal to the wrapper is not passed on, but the wrapper still waits for it.
run_program() {
  signal_reset=
  # Only what sh ignores for the background: INT or QUIT ignored by the wrapper's own caller
  # stays ignored for the program, as it would be without the wrapper (SigIgn: bits 1, 2).
  proc_self_field SigIgn: status
  ignored=${field#"${field%?}"}  # its last hex digit: signals 1 to 4
  case $(( 0x${ignored:-0} & 6 )) in
    0) reset=INT,QUIT ;; 2) reset=QUIT ;; 4) reset=INT ;; *) reset= ;;
  esac
  # The background child's stdin is /dev/null until redirected: the program's own stdin is
  # handed on through a spare descriptor, the first of 3..9 the wrapper's caller did not pass
  # (3 may be a socket systemd handed on, a jobserver pipe, a lock the caller holds: the
  # program inherits it untouched), closed again for the program. A closed stdin stays closed;
  # a stdin that is /dev/null (a CI job's, a service's) is the background child's own, and
  # needs no spare one: a caller that hands on all of 3..9 (a jobserver, systemd's sockets)
  # left none, and the program ran in the foreground, out of reach of the signals sent to the
  # wrapper. (/proc/self, read by the shell's own `[`: see proc_self_field.)
  spare='' stdin_as_is=''
  if [ -d /proc/self/fd ]; then
    for fd in 3 4 5 6 7 8 9; do
      if [ ! -e "/proc/self/fd/$fd" ] && [ ! -h "/proc/self/fd/$fd" ]; then spare=$fd; break; fi
    done
    if [ ! -e /proc/self/fd/0 ] && [ ! -h /proc/self/fd/0 ]; then
      stdin_as_is=closed
    elif [ /proc/self/fd/0 -ef /dev/null ]; then
      stdin_as_is=null
    fi
  fi
  if [ -z "$spare" ] && [ -z "$stdin_as_is" ]; then
    run_in_foreground "$@"  # no /proc to tell which are free, or none is
    return 0
  elif [ -z "$reset" ]; then
    :
  elif env "--default-signal=$reset" true 2>/dev/null; then
    signal_reset=--default-signal=$reset
  else
    run_in_foreground "$@"
    return 0
  fi
  child='' pending='' received=''
  for sig in HUP INT QUIT TERM; do trap "forward_signal $sig" "$sig"; done
  case $stdin_as_is in
    closed) "$@" <&- & ;;
    null) "$@" </dev/null & ;;
    *)
      eval "exec $spare<&0"
      eval '"$@" <&'"$spare $spare"'<&- &' ;;
  esac
  child=$!
  [ -n "$stdin_as_is" ] || eval "exec $spare<&-"
  # A signal whose trap ran before the lines above (the program may already be running) is
  # passed on now that its pid is known.
  [ -z "$pending" ] || kill -s "$pending" "$child" 2>/dev/null || true
  while :; do
    signalled=
    # 2>/dev/null: the shell's own line for a child a signal ended ("Segmentation fault",
    # "Terminated"), which the program run without the wrapper never printed. Its stderr is
    # its own, set when it started.
    wait "$child" 2>/dev/null; status=$?
    # A signal's trap interrupts the wait (status 128+N); the program's own status comes
    # from waiting again (it is kept when the program had already ended).
    [ -n "$signalled" ] || break
  done
  end_as_program
  exit_on_signals
}

# Execs "$@" (the program, or env/nsys/the wrapper that runs it) with the environment the
# wrapper's caller gave, changed only in the variables the wrapper sets for the program
# (restore_environment): the CDPATH the wrappers unset for their own `cd`, the variables whose
# names are no shell names (spring.profiles.active, FOO-BAR: Kubernetes and Java set such),
# which sh drops as it starts when it is dash, and the value the caller gave a variable that
# shares its name with one of the wrapper's own. The caller's environment is read from the
# wrapper's own start-up environment, /proc/PID/environ of its main shell (noted by
# note_startup_environment where one holds such a name), beside what sh exports now (python3's
# own environment); python3 execs "$@" with both, so the program keeps this process's pid,
# which the wrapper waits on and passes signals to. In a child of the main shell (record, nsys,
# ci-smoke-profile, which wait for it) python3 reads that file itself; in the main shell (run,
# which execs in place: its start-up environment is gone once python3 runs), from a copy in a
# temporary file. Without /proc, a python3 that runs, or (for run) a writable TMPDIR or /tmp:
# as sh left it (CDPATH handed back). The program's LD_PRELOAD (the shim, a sanitizer's
# runtime) is not the tools' here: unset for them, handed to python3 apart.
exec_with_environment() {
  if [ -n "${ferrum_caller_cdpath+set}" ]; then
    CDPATH=$ferrum_caller_cdpath
    export CDPATH
  fi
  if [ -n "${ferrum_environ_pid:-}" ]; then
    env_preload_set=${LD_PRELOAD+set} env_preload=${LD_PRELOAD-}
    unset LD_PRELOAD
    # The wrapper's own choice of Python where it makes one (ferrum-replay's find_python, which
    # takes FERRUM_REPLAY_PYTHON first: the package's command hands its interpreter on, and
    # PATH may hold no python3), python3 otherwise.
    env_python=python3
    if command -v find_python >/dev/null 2>&1 && find_python; then env_python=$python; fi
    # A python3 that cannot run (a pyenv shim of a version not installed, a stale venv's link)
    # is not exec'd: the program would never start. (Any lower-case name in the environment,
    # http_proxy, takes this path.)
    if "$env_python" -I -S -c '' >/dev/null 2>&1; then
      environ=/proc/$ferrum_environ_pid/environ startup=''
      proc_self_field '' stat || field=''
      if [ -n "$field" ] && [ "${field%% *}" != "$ferrum_environ_pid" ]; then
        startup=$environ
      else
        [ -n "${temp_dir:-}" ] || find_temp_dir 2>/dev/null  # the wrapper warned of TMPDIR
        if [ -n "$temp_dir" ] &&
            startup=$(mktemp "$temp_dir/ferrum-replay-env.XXXXXX" 2>/dev/null); then
          cat "$environ" >"$startup" 2>/dev/null || { rm -f "$startup"; startup=''; }
        else
          startup=''
        fi
      fi
      if [ -n "$startup" ]; then
        # The signals this shell ignores (it gives the program what it was given): Python
        # ignores SIGPIPE and SIGXFSZ from its start, and its exec would hand that on.
        proc_self_field 'SigIgn:' status || field=''
        exec "$env_python" -I -S -c "$restore_environment" "$startup" "$env_preload_set" "$env_preload" \
          "$field" "$@"
      fi
    fi
    [ -z "$env_preload_set" ] || export LD_PRELOAD="$env_preload"
  fi
  exec "$@"
}

# Called first thing by the wrappers' main shell. Sets the wrapper's EXIT trap (at_exit) and
# notes its pid for exec_with_environment when its start-up environment holds a name sh cannot,
# or one that the wrappers' own variables may share (any name but an upper-case one and `_`:
# theirs are lower-case, and sh exports a variable it was given whatever the script later
# assigns to it: a program run with out=, version=, dir= in its environment got the wrapper's
# values), and /proc/$$ is this very process (a /proc of another PID namespace may give $$ to
# another). Read by this shell (/proc/self).
note_startup_environment() {
  reraise='' received=''
  at_exit ''
  ferrum_environ_pid='' temp_dir=''
  [ /proc/$$/stat -ef /proc/self/stat ] 2>/dev/null || return 0
  { grep -qzv -e '^[A-Z][A-Z0-9_]*=' -e '^_=' </proc/self/environ; } 2>/dev/null || return 0
  ferrum_environ_pid=$$
}

# Run by python3 for exec_with_environment: argv[1] the wrapper's start-up environment
# (NUL-separated): the main shell's /proc/PID/environ, or a copy of it, removed once read;
# what sh exports now is python3's own environment as exec'd (/proc/self/environ); argv[2] "set" when the program gets LD_PRELOAD, argv[3] its value; argv[4]
# the shell's ignored signals (SigIgn, hexadecimal; empty when unread: none). The program's
# environment: the first, but for the variables the wrappers set for the program (`ours`:
# LD_PRELOAD, NVTX_INJECTION64_PATH, FERRUM_*, the list docs/usage.md gives), which are as sh
# exports them now, and for what sh exports that the first lacks; its LD_PRELOAD; its SIGPIPE
# and SIGXFSZ, which Python ignores from its start, as the shell had them. A program that is a
# script without a `#!` line runs under /bin/sh, as execvp and sh run it (Python's exec does not).
restore_environment='
import errno, os, re, signal, sys
path, preload_set, preload, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5:]
try:
    ignored = int(sys.argv[4].strip() or "0", 16)
except ValueError:
    ignored = 0
for number in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(number, signal.SIG_IGN if ignored >> (number - 1) & 1 else signal.SIG_DFL)
env = None
try:
    with open(path, "rb") as handle:
        startup = handle.read()
    entries = [e.split(b"=", 1) for e in startup.split(b"\0") if b"=" in e[1:]]
    ours = re.compile(rb"(?:LD_PRELOAD|NVTX_INJECTION64_PATH|FERRUM_[A-Za-z0-9_]*)\Z")
    env = {name: value for name, value in entries if not ours.match(name)}
    # What sh exported: the environment python3 was started with, not os.environ, to which
    # Python adds LC_CTYPE=C.UTF-8 under LANG=C (PEP 538).
    with open("/proc/self/environ", "rb") as handle:
        exported = [e.split(b"=", 1) for e in handle.read().split(b"\0") if b"=" in e[1:]]
    for name, value in exported:
        if ours.match(name) or name not in env:
            env[name] = value
    if preload_set:
        env[b"LD_PRELOAD"] = os.fsencode(preload)
except (OSError, ValueError):
    pass
if not path.startswith("/proc/"):
    try:
        os.unlink(path)
    except OSError:
        pass
try:
    if env is None:  # what sh passed: nothing restored
        if preload_set:
            os.environ["LD_PRELOAD"] = preload
        os.execvp(argv[0], argv)
    os.execvpe(argv[0], argv, env)
except OSError as error:
    if error.errno == errno.ENOEXEC:
        program = argv[0]
        if "/" not in program:
            path = (env or os.environb).get(b"PATH", b"/usr/bin:/bin").split(b":")
            found = [os.path.join(os.fsdecode(d or b"."), program) for d in path]
            found = [f for f in found if os.path.isfile(f) and os.access(f, os.X_OK)]
            program = found[0] if found else program
        try:
            os.execve("/bin/sh", ["/bin/sh", program] + argv[1:],
                      os.environ if env is None else env)
        except OSError:
            pass
    sys.stderr.write("%s: %s\n" % (argv[0], os.strerror(error.errno)))
    sys.exit(127 if error.errno == errno.ENOENT else 126)
'

# The program in the foreground: nothing can be passed on (sh runs a trap only once the
# program has ended), the wrapper still waits for it and keeps its status — but where the
# program died of the signal the wrapper was sent too (one sent to the whole group, a Ctrl-C),
# it ends by it (end_as_program). (Ending by a signal the program may not have got would
# override the status of a program that got it and handled it: a group's TERM.)
run_in_foreground() {
  received=''
  for sig in HUP INT QUIT TERM; do trap "received=$sig" "$sig"; done
  ("$@"); status=$?
  end_as_program
  exit_on_signals
}

forward_signal() {
  signalled=1 received=$1
  case $1 in INT|QUIT) ! in_terminal_foreground || return 0 ;; esac
  if [ -n "$child" ]; then
    kill -s "$1" "$child" 2>/dev/null || true
  else
    pending=$1
  fi
}

# Sets `field` to the rest of the first line of /proc/self/$2 that starts with $1 ($1 empty:
# the first line); false if there is none. Read by the shell itself, without a fork: /proc/self
# is then this shell, where a command's (sed, cat) would be its own, and $$ may name another
# process (a /proc of another PID namespace, as under `unshare -pf` without --mount-proc).
proc_self_field() {
  field=''
  { while IFS= read -r line; do
      case $line in "$1"*) field=${line#"$1"}; return 0 ;; esac
    done <"/proc/self/$2"; } 2>/dev/null
  return 1
}

# Whether this process's group is its terminal's foreground group (/proc/self/stat: pgrp and
# tpgid, fields 3 and 6 after the command's closing parenthesis).
in_terminal_foreground() {
  proc_self_field '' stat || return 1
  stat=$field
  set -f; set -- ${stat##*) }; set +f
  [ $# -ge 6 ] && [ "$3" = "$6" ]
}

# Before and after the program: a signal ends the wrapper as it would have, by that signal
# after its EXIT trap (temporary files removed; QUIT: exit 131, see end_as_program).
exit_on_signals() {
  trap 'reraise=HUP; exit 129' HUP; trap 'reraise=INT; exit 130' INT
  trap 'exit 131' QUIT; trap 'reraise=TERM; exit 143' TERM
}

# The wrapper's EXIT trap: ACTIONS (its temporary files removed; '' for none; replaces the
# ones before), then the wrapper's end by the signal in `reraise` where one is due. A shell
# that runs the wrapper (a loop in a script, xargs) stops on a Ctrl-C only when the command
# it waited for was *killed* by SIGINT: exit 130 looks handled, and the loop went on to its
# next program. Killed by the signal, the wrapper ends as the program did.
at_exit() {
  exit_actions=$1
  trap 'eval "$exit_actions"; ending_signal' EXIT
}
ending_signal() {
  case $reraise in
    '') ;;
    QUIT) trap - EXIT; exit 131 ;;
    *) trap - EXIT "$reraise"; kill -s "$reraise" $$ ;;
  esac
}

# After the program: where it died of the signal the wrapper itself was sent (a Ctrl-C typed
# at its terminal reaches both; a TERM passed on), the wrapper ends by that signal too, once
# it has reported (at_exit). A program that exited 130 on its own after a Ctrl-C cannot be
# told from one the signal killed (sh sees 130 for both): it ends the wrapper too. QUIT keeps
# its status: killed by it, the wrapper would leave a core file of the shell.
end_as_program() {
  case $received in
    HUP) [ "$status" -ne 129 ] || reraise=HUP ;;
    INT) [ "$status" -ne 130 ] || reraise=INT ;;
    TERM) [ "$status" -ne 143 ] || reraise=TERM ;;
  esac
}

# The one rule for every path the wrappers make absolute from the working directory ($PWD).
# Sets working_dir to it, or is false (working_dir_problem says why) where $PWD cannot stand
# for it: empty (dash, started in a directory that was deleted: getcwd fails and PWD stays
# unset), not absolute (an odd PWD in the caller's environment), or no longer this process's
# working directory (deleted or moved since the shell started: bash keeps the old name). An
# empty PWD made '' + '/t.json' = '/t.json': record wrote its traces and its run notes into
# the root directory (F126).
working_directory() {
  working_dir=${PWD:-}
  case $working_dir in
    /*) [ "$working_dir" -ef . ] 2>/dev/null && return 0
        working_dir_problem="the working directory $(shown "$working_dir") is not there any more (deleted or moved)" ;;
    '') working_dir_problem="the working directory is not there any more (deleted: the shell cannot tell where it is)" ;;
    *) working_dir_problem="PWD $(shown "$working_dir") is not an absolute path" ;;
  esac
  working_dir=''
  return 1
}

# working_directory, or one line and exit 2 (before the program runs): $1 says what needed it.
need_working_directory() {
  working_directory && return 0
  printf '%s: %s: %s (cd to a directory that exists, or give an absolute path)\n' \
    "$prog" "$working_dir_problem" "$1" >&2
  exit 2
}

# Sets the variable named $1 to the path $2 made absolute, under the working directory when it
# is relative: a path handed to the program's processes (a relative TMPDIR's run directory),
# which may work in other directories, or to a command that would take a leading '-' for an
# option (mkdir, mktemp). Assigned, never printed: $(...) drops a name's trailing newlines
# (`--out 'smoke<LF>'` wrote into another directory, `smoke`). A relative path without a
# working directory to resolve it against: refused (need_working_directory).
absolute() {
  case $2 in
    /*) eval "$1=\$2" ;;
    *) need_working_directory "cannot tell where the relative path $(shown "$2") is"
       eval "$1=\$working_dir/\$2" ;;
  esac
}

# Sets temp_dir to the directory for this run's own temporary files, absolute: TMPDIR (default
# /tmp) when it is a directory this user can write in, else /tmp, with one warning line (the
# program still runs, with its TMPDIR as given); empty when neither is.
find_temp_dir() {
  # (A relative TMPDIR without a working directory: not one this user can write in.)
  temp_dir=${TMPDIR:-/tmp} td_resolved=1
  case $temp_dir in
    /*) ;;
    *) if working_directory; then temp_dir=$working_dir/$temp_dir; else td_resolved=''; fi ;;
  esac
  if [ -z "$td_resolved" ] || [ ! -d "$temp_dir" ] || [ ! -w "$temp_dir" ] || [ ! -x "$temp_dir" ]; then
    if [ -d /tmp ] && [ -w /tmp ] && [ -x /tmp ]; then
      printf '%s: warning: TMPDIR %s is not a directory this user can write in: temporary files go to /tmp\n' \
        "$prog" "$(shown "$temp_dir")" >&2
      temp_dir=/tmp
    else
      temp_dir=''
    fi
  fi
}

# The canary of a markers' directory this run made (common/output_file.hpp
# kMarkerCanarySuffix: the shim's marker stem, ferrum-replay, + .all-marked): a process that
# cannot make its marker there (no space, no inode, a quota) renames it ferrum-replay.unmarked,
# and the judges fail the run rather than pass without a process they could not see.
arm_marker_canary() {
  { true >"$1/ferrum-replay.all-marked"; } 2>/dev/null || true  # not `:`: see forget_earlier_runs
}
