#!/usr/bin/python3
"""End-to-end test: kiln's engine-run against PyTorch on the project's own exports (small sizes).

  /usr/bin/python3 tests/e2e/test_pytorch_exports.py --engine-run PATH/TO/engine-run --workdir DIR

For each model of models/export_models.py and each of its cases:
  1. export MODEL.small.onnx into DIR (skipped when the .onnx is newer than every models/*.py) and write
     the case's inputs/expected .npy from PyTorch under DIR/ref/MODEL/CASE/;
  2. [onnx-numpy] evaluate the .onnx with the numpy interpreter in onnx_numpy_eval.py and compare with
     PyTorch, so a broken export is told apart from a kiln bug;
  3. [engine] run `engine-run MODEL.onnx --input NAME=FILE.npy ... --output-dir OUT` and compare every
     OUT/<output>.npy with PyTorch's (np.allclose, atol 1e-4, rtol 1e-3), printing the max abs error.
Also, in PyTorch alone, the control transformer's incremental path must reproduce its full forward.
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import argparse
import os
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS_DIR = os.path.join(REPO, "models")
EXPORT_SCRIPT = os.path.join(MODELS_DIR, "export_models.py")
sys.path.insert(0, MODELS_DIR)
sys.path.insert(0, HERE)

import export_models  # noqa: E402
import onnx_numpy_eval  # noqa: E402

SIZE = "small"
ATOL, RTOL = 1e-4, 1e-3
INCREMENTAL_ATOL = 1e-5


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def record(self, name, ok, detail=""):
        print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)


def newest_script_mtime():
    return max(os.path.getmtime(os.path.join(MODELS_DIR, f)) for f in os.listdir(MODELS_DIR) if f.endswith(".py"))


def prepare(model, workdir, timeout):
    """Export the model and write all its reference cases unless an up-to-date export is there."""
    spec = export_models.spec_for(model, SIZE)
    onnx_path = os.path.join(workdir, f"{model}.{SIZE}.onnx")
    ref_dir = os.path.join(workdir, "ref", model)
    fresh = os.path.exists(onnx_path) and os.path.getmtime(onnx_path) > newest_script_mtime()
    have_refs = all(os.path.isdir(os.path.join(ref_dir, c, "expected")) for c in spec.cases)
    if not (fresh and have_refs):
        cmd = [sys.executable, EXPORT_SCRIPT, model, "--size", SIZE, "--out", onnx_path,
               "--reference-dir", ref_dir, "--quiet"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"export failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return spec, onnx_path, ref_dir


def load_case(spec, ref_dir, case):
    d = os.path.join(ref_dir, case)
    inputs = {n: os.path.join(d, "inputs", export_models.sanitize(n) + ".npy") for n in spec.input_names}
    expected = {n: np.load(os.path.join(d, "expected", export_models.sanitize(n) + ".npy"))
                for n in spec.output_names}
    return inputs, expected


def compare(expected, got):
    """Returns (ok, detail) comparing dicts of arrays keyed by output name."""
    ok = True
    parts = []
    for name, exp in expected.items():
        act = got.get(name)
        if act is None:
            ok = False
            parts.append(f"{name} missing")
            continue
        if act.shape != exp.shape or act.dtype != exp.dtype:
            ok = False
            parts.append(f"{name} is {act.dtype}{list(act.shape)}, expected {exp.dtype}{list(exp.shape)}")
            continue
        if exp.size == 0:
            parts.append(f"{name} empty")
            continue
        err = float(np.max(np.abs(act.astype(np.float64) - exp.astype(np.float64))))
        good = bool(np.allclose(act, exp, atol=ATOL, rtol=RTOL))
        ok = ok and good
        parts.append(f"{name} max_abs_err={err:.3g}{'' if good else ' (NOT close)'}")
    return ok, "; ".join(parts)


def check_numpy_eval(spec, onnx_path, input_files, expected):
    inputs = {n: np.load(f) for n, f in input_files.items()}
    return compare(expected, onnx_numpy_eval.run_model(onnx_path, inputs))


def check_engine(engine_run, spec, onnx_path, input_files, expected, out_dir, timeout):
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, f))
    cmd = [engine_run, onnx_path]
    for name, path in input_files.items():
        cmd += ["--input", f"{name}={path}"]
    # Two timed runs: the outputs written come from the last, a steady-state run on the planned arena.
    cmd += ["--output-dir", out_dir, "--iterations", "2"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"engine-run timed out after {timeout} s"
    except OSError as e:
        return False, f"cannot run engine-run: {e}"
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return False, f"engine-run exited {proc.returncode}: {' | '.join(msg[-5:])}"
    got = {}
    for name in spec.output_names:
        path = os.path.join(out_dir, export_models.sanitize(name) + ".npy")
        if os.path.exists(path):
            got[name] = np.load(path)
    ok, detail = compare(expected, got)
    return ok, f"{detail} ({elapsed:.2f} s)"


def check_incremental_matches_full(results):
    """full(T) == full(T-1) + incremental(1), and == full(1) + incremental(1) repeated, in PyTorch."""
    import control_transformer as ct
    model = ct.build_model(SIZE)
    t = ct.default_timesteps(SIZE)
    batch = ct.random_batch(SIZE, t, seed=7)
    full = ct.run(model, ct.make_inputs(SIZE, batch, *ct.empty_cache(SIZE)))

    def incremental_from(first):
        out = ct.run(model, ct.make_inputs(SIZE, ct.slice_timesteps(batch, 0, first), *ct.empty_cache(SIZE)))
        for step in range(first, t):
            out = ct.run(model, ct.make_inputs(SIZE, ct.slice_timesteps(batch, step, step + 1),
                                               out["projected_embeddings"], out["kv_cache"]))
        return out

    for first in sorted({t - 1, 1}):
        got = incremental_from(first)
        errs = {k: float(np.max(np.abs(full[k] - got[k]))) for k in ct.OUTPUT_NAMES}
        ok = all(np.allclose(full[k], got[k], atol=INCREMENTAL_ATOL, rtol=0) for k in ct.OUTPUT_NAMES)
        detail = "; ".join(f"{k} max_abs_err={e:.3g}" for k, e in errs.items())
        results.record(f"control_transformer/incremental_matches_full [pytorch, full({first})"
                       f"+{t - first}x incremental(1) vs full({t})]", ok, detail)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-run", required=True, help="path of kiln's engine-run binary")
    p.add_argument("--workdir", required=True, help="where exports, references and outputs go")
    p.add_argument("--models", default=",".join(export_models.MODELS), help="comma-separated subset")
    p.add_argument("--timeout", type=float, default=600, help="seconds per export / engine-run call")
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    engine_run = os.path.abspath(a.engine_run)
    results = Results()

    models = [m for m in a.models.split(",") if m]
    if "control_transformer" in models:
        try:
            check_incremental_matches_full(results)
        except Exception:
            results.record("control_transformer/incremental_matches_full [pytorch]", False, traceback.format_exc())

    for model in models:
        try:
            spec, onnx_path, ref_dir = prepare(model, a.workdir, a.timeout)
        except Exception as e:
            for case in export_models.spec_for(model, SIZE).cases:
                results.record(f"{model}/{case} [export]", False, str(e))
            continue
        for case in spec.cases:
            input_files, expected = load_case(spec, ref_dir, case)
            try:
                ok, detail = check_numpy_eval(spec, onnx_path, input_files, expected)
            except Exception as e:
                ok, detail = False, f"{type(e).__name__}: {e}"
            results.record(f"{model}/{case} [onnx-numpy]", ok, detail)
            out_dir = os.path.join(a.workdir, "run", model, case)
            ok, detail = check_engine(engine_run, spec, onnx_path, input_files, expected, out_dir, a.timeout)
            results.record(f"{model}/{case} [engine]", ok, detail)

    if results.failed:
        print("failed: " + ", ".join(results.failed))
    print(f"{results.passed} passed, {len(results.failed)} failed")
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
