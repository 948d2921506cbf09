#!/usr/bin/python3
"""The full-size ControlTransformer of seed 000 (274 tokens per timestep, 8 layers, width 384, image
3x256x256) against PyTorch (kiln_e2e.compare_arrays: atol 1e-4, rtol 1e-3):
  1. engine-run on the ONNX model: 6 timesteps with an empty cache, and 1 timestep on a 1370-token cache;
  2. one engine built by engine-build from configs/incremental.yaml with the full profile ranged as
     timesteps {min: 1, opt: 6, max: 6}, run per profile at 5 and 6 timesteps (full) and at 274 and 1370
     cached tokens (incremental: the range's min and opt = max).

  /usr/bin/python3 tests/e2e/test_full_size_control_transformer.py --engine-run PATH --engine-build PATH --workdir DIR

The export and its references are kept in DIR and made again only when models/*.py changed.
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402

MODEL = "control_transformer"
CASES = ["full", "incremental", "full:T=5", "incremental:T=1,cached=1"]
FULL_RANGED = ("profiles.full.dims={timesteps: {min: 1, opt: 6, max: 6}, cached_seq: 0, "
               "new_seq: {min: 274, opt: 1644, max: 1644}, total_seq: {min: 274, opt: 1644, max: 1644}}")


def main():
    a = kiln_e2e.parse_tool_args(kiln_e2e.tool_parser(__doc__))
    work = a.workdir  # absolute: --set model= resolves against the config's folder
    onnx_path = os.path.join(work, MODEL + ".onnx")
    ref_dir = os.path.join(work, "ref")
    res = kiln_e2e.Results()
    try:
        spec = kiln_e2e.export_model(MODEL, "full", onnx_path, ref_dir, CASES, a.timeout, res)
    except RuntimeError as e:
        res.record("[export] full-size ControlTransformer", False, str(e))
        return res.finish()

    def run_case(name, case, target, profile=None):
        inputs, expected = kiln_e2e.reference_case(ref_dir, case, spec)
        kiln_e2e.run_and_compare(res, f"[engine] {name} (case {case})", a.engine_run, target, inputs, expected,
                                 os.path.join(work, "out", name), profile=profile, timeout=a.timeout)

    run_case("onnx_full", "full", onnx_path)
    run_case("onnx_incremental", "incremental", onnx_path)

    engine = os.path.join(work, MODEL + ".engine")
    config = os.path.join(kiln_e2e.REPO, "configs", "incremental.yaml")
    proc, secs = kiln_e2e.engine_build(a.engine_build, config, engine, model=onnx_path, sets=[FULL_RANGED],
                                       timeout=a.timeout)
    res.timed("engine-build configs/incremental.yaml --no-bench", secs)
    res.record("[build] configs/incremental.yaml, full profile ranged 1..6 timesteps", proc.returncode == 0,
               f"{secs:.1f} s" if proc.returncode == 0 else f"exit {proc.returncode}: {kiln_e2e.tail(proc.stderr)}")
    if proc.returncode == 0:
        run_case("engine_full_T6", "full", engine, "full")
        run_case("engine_full_T5", "full:T=5", engine, "full")
        run_case("engine_incremental_cached1370", "incremental", engine, "incremental")
        run_case("engine_incremental_cached274", "incremental:T=1,cached=1", engine, "incremental")
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
