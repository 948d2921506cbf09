#!/usr/bin/python3
"""The end-to-end tests' own helpers (kiln_e2e.py) and scripts/compare_npy.py: a comparison that
compares nothing, a missing output, another dtype or shape, a NaN on one side only, an error beyond the
tolerance and a check with nothing checked must all fail; matching outputs must pass.

  /usr/bin/python3 tests/e2e/test_kiln_e2e.py --workdir DIR
"""
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kiln_e2e  # noqa: E402

COMPARE_NPY = os.path.join(kiln_e2e.REPO, "scripts", "compare_npy.py")


def main():
    work = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__, tools=(), timeout=None)).workdir
    shutil.rmtree(work, ignore_errors=True)
    res = kiln_e2e.Results()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)

    def expect(name, problems, should_fail):
        res.record(name, bool(problems) == should_fail,
                   f"problems: {problems}" if problems else "no problems")

    expect("matching arrays pass", kiln_e2e.compare_arrays({"y": x}, {"y": x + 1e-6})[0], False)
    expect("empty expected set fails", kiln_e2e.compare_arrays({}, {"y": x})[0], True)
    expect("missing output fails", kiln_e2e.compare_arrays({"y": x}, {})[0], True)
    expect("other dtype fails", kiln_e2e.compare_arrays({"y": x}, {"y": x.astype(np.float64)})[0], True)
    expect("other shape fails", kiln_e2e.compare_arrays({"y": x}, {"y": x.reshape(4, 3)})[0], True)
    expect("error beyond atol + rtol fails", kiln_e2e.compare_arrays({"y": x}, {"y": x + 2e-3})[0], True)
    nan = x.copy()
    nan[1, 1] = np.nan
    expect("NaN on both sides passes", kiln_e2e.compare_arrays({"y": nan}, {"y": nan.copy()})[0], False)
    expect("NaN on one side fails", kiln_e2e.compare_arrays({"y": x}, {"y": nan})[0], True)
    expect("empty arrays of the same shape pass",
           kiln_e2e.compare_arrays({"y": np.zeros((0, 4), np.float32)}, {"y": np.zeros((0, 4), np.float32)})[0], False)

    want, got, empty = (os.path.join(work, d) for d in ("want", "got", "empty"))
    kiln_e2e.save_npys(want, {"y": x, "a/b": x})
    kiln_e2e.save_npys(got, {"y": x, "a/b": x})
    os.makedirs(empty)
    expect("compare_dirs: equal folders pass", kiln_e2e.compare_dirs(want, got)[0], False)
    expect("compare_dirs: an expected folder without .npy files fails", kiln_e2e.compare_dirs(empty, got)[0], True)
    expect("compare_dirs: a missing expected folder fails", kiln_e2e.compare_dirs(os.path.join(work, "nope"), got)[0], True)
    expect("compare_dirs: an output missing from GOT fails", kiln_e2e.compare_dirs(want, empty)[0], True)

    for args, want_rc in (([want, got], 0), ([empty, got], 1), ([want, empty], 1)):
        p = subprocess.run([sys.executable, COMPARE_NPY] + args, capture_output=True, text=True)
        res.record(f"compare_npy.py {' '.join(os.path.basename(a) for a in args)} exits {want_rc}", p.returncode == want_rc,
                   f"exit {p.returncode}: {p.stdout.strip()} {p.stderr.strip()}")

    idle = kiln_e2e.Results()
    res.record("Results with nothing checked fails", idle.finish() == 1)

    def proc(rc, stderr):
        return subprocess.CompletedProcess([], rc, "", stderr)

    expect("one-line error passes", kiln_e2e.one_line_error_problems(proc(1, "x.onnx: bad dim 3\n"), ["x.onnx", ("dim", "axis")]), False)
    expect("one-line error after progress lines passes",
           kiln_e2e.one_line_error_problems(proc(1, "[engine-build] importing\nbad dim\n"), ["bad"]), False)
    expect("exit 0 fails", kiln_e2e.one_line_error_problems(proc(0, "bad\n"), []), True)
    expect("a signal fails", kiln_e2e.one_line_error_problems(proc(-11, "bad\n"), []), True)
    expect("two error lines fail", kiln_e2e.one_line_error_problems(proc(1, "bad\nworse\n"), []), True)
    expect("'internal error' fails", kiln_e2e.one_line_error_problems(proc(1, "internal error: x\n"), []), True)
    expect("a missing needle fails", kiln_e2e.one_line_error_problems(proc(1, "bad\n"), ["dim"]), True)
    timed_out, _ = kiln_e2e.run_cmd([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    res.record("run_cmd: a timeout is exit -9, not an exception", timed_out.returncode == -9, timed_out.stderr)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
