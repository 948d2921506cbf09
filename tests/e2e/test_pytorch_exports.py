#!/usr/bin/python3
"""End-to-end test: kiln's engine-run against PyTorch on the project's own exports (small sizes).

  /usr/bin/python3 tests/e2e/test_pytorch_exports.py --engine-run PATH/TO/engine-run --workdir DIR

For each model of models/export_models.py and each of its cases:
  1. export MODEL.small.onnx into DIR (skipped when the .onnx is newer than every models/*.py) and write
     the case's inputs/expected .npy from PyTorch under DIR/ref/MODEL/CASE/;
  2. [onnx-numpy] evaluate the .onnx with the numpy interpreter in onnx_numpy_eval.py and compare with
     PyTorch, so a broken export is told apart from a kiln bug;
  3. [engine] run `engine-run MODEL.onnx --input NAME=FILE.npy ... --output-dir OUT` and compare every
     OUT/<output>.npy with PyTorch's (kiln_e2e.compare_arrays: atol 1e-4, rtol 1e-3), printing the max
     abs error.
Also, in PyTorch alone, the control transformer's incremental path must reproduce its full forward.
The summary counts the [engine] cases (kiln against PyTorch) apart from the checks of the references
themselves ([onnx-numpy], [pytorch]); the last line is `N passed, N failed`, the exit status non-zero if
anything failed.
"""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402  (puts models/ on the path)
import export_models  # noqa: E402
import onnx_numpy_eval  # noqa: E402

SIZE = "small"
INCREMENTAL_ATOL = 1e-5
KILN = "kiln engine cases vs PyTorch"
REFERENCE = "reference checks (numpy interpreter vs PyTorch, PyTorch vs itself)"


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
        problems, errors = kiln_e2e.compare_arrays({k: full[k] for k in ct.OUTPUT_NAMES}, got, INCREMENTAL_ATOL, 0)
        results.check(f"control_transformer/incremental_matches_full [pytorch, full({first})"
                      f"+{t - first}x incremental(1) vs full({t})]", problems, "max abs err " + ", ".join(errors), REFERENCE)


def main():
    p = kiln_e2e.tool_parser(__doc__, tools=("engine-run",), timeout=600)
    p.add_argument("--models", default=",".join(export_models.MODELS), help="comma-separated subset")
    a = kiln_e2e.parse_tool_args(p)
    engine_run = a.engine_run
    results = kiln_e2e.Results()

    models = [m for m in a.models.split(",") if m]
    if "control_transformer" in models:
        try:
            check_incremental_matches_full(results)
        except Exception:
            results.record("control_transformer/incremental_matches_full [pytorch]", False, traceback.format_exc(),
                           REFERENCE)

    for model in models:
        cases = export_models.spec_for(model, SIZE).cases
        onnx_path = os.path.join(a.workdir, f"{model}.{SIZE}.onnx")
        ref_dir = os.path.join(a.workdir, "ref", model)
        try:
            spec = kiln_e2e.export_model(model, SIZE, onnx_path, ref_dir, cases, a.timeout)
        except Exception as e:
            for case in cases:
                results.record(f"{model}/{case} [export]", False, str(e), KILN)
            continue
        for case in cases:
            input_files, expected = kiln_e2e.reference_case(ref_dir, case, spec)
            try:
                got = onnx_numpy_eval.run_model(onnx_path, {n: np.load(f) for n, f in input_files.items()})
                problems, errors = kiln_e2e.compare_arrays(expected, got)
            except Exception as e:
                problems, errors = [f"{type(e).__name__}: {e}"], []
            results.check(f"{model}/{case} [onnx-numpy]", problems, "max abs err " + ", ".join(errors), REFERENCE)
            kiln_e2e.run_and_compare(results, f"{model}/{case} [engine]", engine_run, onnx_path, input_files, expected,
                                     os.path.join(a.workdir, "run", model, case), group=KILN, timeout=a.timeout)
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
