#!/usr/bin/python3
"""Shared helpers of the end-to-end tests (tests/e2e/test_*.py): export a model with its PyTorch
references, build an engine, run engine-run, compare outputs, check one-line errors, count results.

One tolerance rule for every comparison (compare_arrays): the same dtype and shape, then
np.allclose(got, want, atol, rtol) with NaN equal to NaN, default atol 1e-4 / rtol 1e-3, and the max
abs error reported per output. Comparing nothing is a failure, not a pass: an empty expected set, an
expected folder without .npy files, a missing output file.

  /usr/bin/python3 tests/e2e/kiln_e2e.py compare WANT_DIR GOT_DIR [--atol A] [--rtol R]
compares every WANT_DIR/<name>.npy with GOT_DIR/<name>.npy (scripts/compare_npy.py is this command).
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS_DIR = os.path.join(REPO, "models")
CONFIGS_DIR = os.path.join(HERE, "configs")
EXPORT_SCRIPT = os.path.join(MODELS_DIR, "export_models.py")
if MODELS_DIR not in sys.path:
    sys.path.insert(0, MODELS_DIR)

ATOL, RTOL = 1e-4, 1e-3


class Results:
    """PASS/FAIL lines as they happen and the closing `N passed, N failed` line. A group (e.g.
    "kiln vs PyTorch") gets its own count in the summary, so checks of the references themselves
    are not counted as checks of kiln."""

    def __init__(self):
        self.passed = 0
        self.failed = []
        self.timings = []
        self.groups = {}

    def record(self, name, ok, detail="", group=None):
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)
        if group:
            counts = self.groups.setdefault(group, [0, 0])
            counts[0] += bool(ok)
            counts[1] += 1

    def check(self, name, problems, detail="", group=None):
        """Records NAME as passed when PROBLEMS is empty; otherwise the problems are the detail."""
        text = "; ".join(problems) if problems else detail
        if problems and detail:
            text = detail + "; " + text
        self.record(name, not problems, text, group)

    def timed(self, label, seconds):
        self.timings.append((label, seconds))

    def finish(self):
        """Prints the timings, the failed checks, per-group counts and `N passed, N failed`; returns
        the exit status (1 if anything failed or nothing was checked)."""
        if self.timings:
            print("\ntimings:")
            for label, secs in self.timings:
                print(f"  {secs:7.2f} s  {label}")
        if self.failed:
            print("failed: " + ", ".join(self.failed))
        for group, (ok, total) in self.groups.items():
            print(f"{group}: {ok} of {total} match")
        print(f"{self.passed} passed, {len(self.failed)} failed", flush=True)
        if self.passed == 0 and not self.failed:
            print("FAIL nothing was checked")
            return 1
        return 1 if self.failed else 0


def tool_parser(doc, tools=("engine-build", "engine-run"), timeout=900):
    """The command line every e2e script shares: --engine-build / --engine-run (those in TOOLS),
    --workdir, and --timeout seconds per command (when TIMEOUT is not None)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for tool in tools:
        p.add_argument(f"--{tool}", required=True, help=f"path of kiln's {tool}")
    p.add_argument("--workdir", required=True, help="where exports, engines and outputs go")
    if timeout is not None:
        p.add_argument("--timeout", type=float, default=timeout, help=f"seconds per command (default {timeout:g})")
    return p


def parse_tool_args(p, argv=None):
    """Parses, makes the tool and workdir paths absolute and creates the workdir."""
    a = p.parse_args(argv)
    for tool in ("engine_build", "engine_run"):
        if getattr(a, tool, None):
            setattr(a, tool, os.path.abspath(getattr(a, tool)))
    a.workdir = os.path.abspath(a.workdir)
    os.makedirs(a.workdir, exist_ok=True)
    return a


def run_cmd(cmd, timeout):
    """(CompletedProcess, seconds). A timeout is a result, not an exception: returncode -9 and a
    stderr line saying so."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        proc = subprocess.CompletedProcess(cmd, -9, out, f"timed out after {timeout} s")
    except OSError as e:
        proc = subprocess.CompletedProcess(cmd, 127, "", f"cannot run {cmd[0]}: {e}")
    return proc, time.perf_counter() - start


def tail(text, n=2000):
    return text if len(text) <= n else "..." + text[-n:]


def sanitize(name):
    """The file name engine-run (runtime/npy_io.h) and models/export_models.py give a tensor: characters
    outside [A-Za-z0-9._-] become '_'. Written here rather than imported from export_models, which
    imports torch, so comparing folders stays quick."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def npy_paths(folder, names):
    return {n: os.path.join(folder, sanitize(n) + ".npy") for n in names}


def load_npys(folder, names):
    return {n: np.load(p) for n, p in npy_paths(folder, names).items()}


def save_npys(folder, arrays):
    """Writes every array to FOLDER/<name>.npy; returns {name: path}."""
    os.makedirs(folder, exist_ok=True)
    paths = npy_paths(folder, arrays)
    for name, a in arrays.items():
        np.save(paths[name], np.ascontiguousarray(a))
    return paths


def input_args(paths):
    args = []
    for name, path in paths.items():
        args += ["--input", f"{name}={path}"]
    return args


# ---- comparison ------------------------------------------------------------------------------------

def compare_arrays(expected, got, atol=ATOL, rtol=RTOL):
    """Compares {name: array} dicts: (problems, errors), where errors lists "name max_abs_err" for
    every output compared and problems is empty when everything matches."""
    problems, errors = [], []
    if not expected:
        return ["no expected outputs to compare"], errors
    for name, want in expected.items():
        have = got.get(name)
        if have is None:
            problems.append(f"{name}: no output")
            continue
        if have.dtype != want.dtype or have.shape != want.shape:
            problems.append(f"{name}: {have.dtype}{list(have.shape)} instead of {want.dtype}{list(want.shape)}")
            continue
        h, w = have.astype(np.float64), want.astype(np.float64)
        nan_mismatch = int(np.count_nonzero(np.isnan(h) != np.isnan(w)))
        with np.errstate(invalid="ignore"):
            diff = np.abs(h - w)
        diff = diff[~np.isnan(diff)]  # NaN on both sides (or inf - inf of equal infinities) is no error
        err = float(diff.max()) if diff.size else 0.0
        errors.append(f"{name} {err:.2e}")
        if nan_mismatch:
            problems.append(f"{name}: {nan_mismatch} elements are NaN on one side only")
        elif not np.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
            problems.append(f"{name}: max abs err {err:.3e} exceeds atol {atol} rtol {rtol}")
    return problems, errors


def compare_outputs(expected, out_dir, atol=ATOL, rtol=RTOL):
    """compare_arrays against OUT_DIR/<name>.npy for every expected name."""
    got = {}
    for name, path in npy_paths(out_dir, expected).items():
        if os.path.exists(path):
            got[name] = np.load(path)
    return compare_arrays(expected, got, atol, rtol)


def compare_dirs(want_dir, got_dir, atol=ATOL, rtol=RTOL):
    """compare_arrays of every WANT_DIR/*.npy against GOT_DIR/<same name>; an expected folder that is
    missing or holds no .npy file is a problem."""
    want_paths = sorted(pathlib.Path(want_dir).glob("*.npy"))
    if not want_paths:
        return [f"expected folder {want_dir} holds no .npy files"], []
    expected = {p.stem: np.load(p) for p in want_paths}
    return compare_outputs(expected, got_dir, atol, rtol)


# ---- export, build, run ----------------------------------------------------------------------------

def export_model(model, size, onnx_path, ref_dir, cases, timeout=900, res=None):
    """Exports MODEL at SIZE to ONNX_PATH and writes each case's inputs and PyTorch outputs under
    REF_DIR/<sanitized case>/, unless the export is newer than every models/*.py and every case is
    there. Returns export_models' spec; raises RuntimeError if the export fails."""
    import export_models
    spec = export_models.spec_for(model, size)
    newest_script = max(os.path.getmtime(os.path.join(MODELS_DIR, f)) for f in os.listdir(MODELS_DIR) if f.endswith(".py"))
    fresh = os.path.exists(onnx_path) and os.path.getmtime(onnx_path) > newest_script
    if fresh and all(os.path.isdir(os.path.join(ref_dir, sanitize(c), "expected")) for c in cases):
        print(f"  {model}: export and references in {os.path.dirname(onnx_path)} are up to date", flush=True)
        return spec
    os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
    cmd = [sys.executable, EXPORT_SCRIPT, model, "--size", size, "--out", onnx_path, "--reference-dir", ref_dir,
           "--quiet", "--case", *cases]
    proc, secs = run_cmd(cmd, timeout)
    if res is not None:
        res.timed(f"export {model} ({size}) + {len(cases)} PyTorch references", secs)
    if proc.returncode != 0:
        raise RuntimeError(f"export failed ({proc.returncode}): {' '.join(cmd)}\n{tail(proc.stderr)}")
    return spec


def reference_case(ref_dir, case, spec):
    """({input: .npy path}, {output: expected array}) of a case written by export_model."""
    d = os.path.join(ref_dir, sanitize(case))
    return npy_paths(os.path.join(d, "inputs"), spec.input_names), load_npys(os.path.join(d, "expected"), spec.output_names)


def engine_build(engine_build_path, config, engine, *, model=None, report=None, bench=False, sets=(), timeout=900):
    """engine-build CONFIG --output ENGINE [--set model=MODEL] [--report REPORT] [--no-bench] [--set ...]."""
    cmd = [engine_build_path, config, "--output", engine, "--report", report or engine + ".report.json"]
    if model:
        cmd += ["--set", f"model={model}"]
    for s in sets:
        cmd += ["--set", s]
    if not bench:
        cmd.append("--no-bench")
    print("  $ " + " ".join(str(c) for c in cmd), flush=True)
    return run_cmd(cmd, timeout)


def engine_run(engine_run_path, target, inputs, out_dir, *, profile=None, iterations=2, extra=(), timeout=900):
    """engine-run TARGET [--profile P] --input ... --output-dir OUT_DIR --iterations N. OUT_DIR is
    emptied first, so no output of an earlier run can pass for this one. The default two iterations
    make the written outputs those of a steady-state run on the planned arena."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    cmd = [engine_run_path, target] + (["--profile", profile] if profile else []) + input_args(inputs)
    cmd += ["--output-dir", out_dir] + (["--iterations", str(iterations)] if iterations else []) + list(extra)
    return run_cmd(cmd, timeout)


def run_and_compare(res, label, engine_run_path, target, inputs, expected, out_dir, *, profile=None,
                    atol=ATOL, rtol=RTOL, note="", group=None, timeout=900):
    """engine-run, then compare_outputs; one PASS/FAIL line with the max abs errors and the time."""
    proc, secs = engine_run(engine_run_path, target, inputs, out_dir, profile=profile, timeout=timeout)
    res.timed(label, secs)
    prefix = f"{note}; " if note else ""
    if proc.returncode != 0:
        res.record(label, False, f"{prefix}engine-run exit {proc.returncode}: {tail(proc.stderr)}", group)
        return False
    problems, errors = compare_outputs(expected, out_dir, atol, rtol)
    res.check(label, problems, f"{prefix}{secs:.2f} s; max abs err " + ", ".join(errors), group)
    return not problems


# ---- errors ----------------------------------------------------------------------------------------

def progress_line(line):
    """Lines of stderr that are not the error: the tools' log lines ("[engine-build] ...",
    "[engine-run] ...") and argparse-style usage."""
    return not line.strip() or line.startswith(("[engine-build]", "[engine-run]", "usage:", "  "))


def one_line_error_problems(proc, needles):
    """An expected failure must exit > 0 (no signal), print exactly one error line on stderr (progress
    lines aside) and no 'internal error', and contain every needle (a tuple: any one of its strings)."""
    lines = [l for l in proc.stderr.splitlines() if not progress_line(l)]
    problems = []
    if proc.returncode == 0:
        problems.append("exit status 0")
    elif proc.returncode < 0:
        problems.append(f"killed by signal {-proc.returncode}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} error lines: {lines[:5]}")
    if "internal error" in proc.stderr:
        problems.append("internal error")
    for want in needles:
        alts = want if isinstance(want, tuple) else (want,)
        if not any(a in proc.stderr for a in alts):
            problems.append(f"stderr lacks {' or '.join(repr(a) for a in alts)}")
    return problems


def compare_cli(argv=None, prog=None):
    """WANT_DIR GOT_DIR [--atol A] [--rtol R]: compare_dirs, one line per output; exit status 1 on any problem."""
    ap = argparse.ArgumentParser(prog=prog, description="Compares every WANT_DIR/<name>.npy with GOT_DIR/<name>.npy "
                                 "(same dtype and shape, np.allclose with NaN equal to NaN); fails if WANT_DIR holds no .npy file.")
    ap.add_argument("want", help="folder of expected outputs")
    ap.add_argument("got", help="folder of the outputs to check")
    ap.add_argument("--atol", type=float, default=ATOL, help=f"absolute tolerance (default {ATOL})")
    ap.add_argument("--rtol", type=float, default=RTOL, help=f"relative tolerance (default {RTOL})")
    a = ap.parse_args(argv)
    problems, errors = compare_dirs(a.want, a.got, a.atol, a.rtol)
    for e in errors:
        print(f"  max abs err {e}")
    print(("FAIL " + "; ".join(problems)) if problems else f"PASS {len(errors)} outputs within atol {a.atol} rtol {a.rtol}")
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["compare"]:
        sys.exit("usage: kiln_e2e.py compare WANT_DIR GOT_DIR [--atol A] [--rtol R]")
    sys.exit(compare_cli(sys.argv[2:], "kiln_e2e.py compare"))
