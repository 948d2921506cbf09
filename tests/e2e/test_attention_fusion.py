#!/usr/bin/python3
"""End-to-end test of attention fusion under ranged profiles: engine-build with `fusions: {attention:
required}` must fuse every attention layer of every profile, and the engine must match PyTorch.

  /usr/bin/python3 tests/e2e/test_attention_fusion.py --engine-build PATH --engine-run PATH --workdir DIR
      [--only NAME ...]

Models (small sizes):
  gpt2  tests/e2e/configs/gpt2_fusion_small.yaml: prefill (seq 1..128, past 0) and decode (seq 1,
        past 1..1024); 2 fused layers per profile; cases from `export_models.py --case`.
  vit   tests/e2e/configs/vit_small.yaml: batch 1..2; 2 fused layers.
  gpt_sep_qkv, gpt_lookahead, rotary_runtime_mask, mha_batch_first, scaled_q_bsd:
        tests/e2e/attention_variants.py, attention written with other module code (separate q/k/v and
        a 2-D causal buffer; the same with a look-ahead buffer that must not pass for causal; rotary
        q/k with a causal mask built at run time; nn.MultiheadAttention batch_first; a q scaled by
        Mul with an additive padding mask); references from PyTorch in this process.
Checks per model: the build succeeds; the report lists, per profile, as many fused sites as the model
has layers, none unfused, each site naming the nodes it replaced (its Softmax among them); engine-run
--profile at shapes across each range (min, between, max) matches PyTorch (atol 1e-4, rtol 1e-3).
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS_DIR = os.path.join(REPO, "models")
CONFIGS_DIR = os.path.join(HERE, "configs")
sys.path.insert(0, MODELS_DIR)
sys.path.insert(0, HERE)

import attention_variants  # noqa: E402
import export_models  # noqa: E402

ATOL, RTOL = 1e-4, 1e-3

# Kiln's own models: config, fused layers per profile, and per profile the export_models cases.
KILN_MODELS = {
    "gpt2": {
        "config": "gpt2_fusion_small.yaml",
        "layers": 2,
        "profiles": {
            "prefill": ["prefill:seq=1", "prefill:seq=5", "prefill:seq=64", "prefill:seq=128"],
            "decode": ["decode:seq=1,past=1", "decode:seq=1,past=17", "decode:seq=1,past=300",
                       "decode:seq=1,past=1024"],
        },
    },
    "vit": {"config": "vit_small.yaml", "layers": 2, "profiles": {"batch": ["batch1", "batch2"]}},
}


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


def run_cmd(cmd, timeout):
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc, time.perf_counter() - start


def tail(text, n=2000):
    return text if len(text) <= n else "..." + text[-n:]


def save_npys(d, arrays):
    os.makedirs(d, exist_ok=True)
    paths = {}
    for name, a in arrays.items():
        paths[name] = os.path.join(d, export_models.sanitize(name) + ".npy")
        np.save(paths[name], np.ascontiguousarray(a))
    return paths


def build(name, config, onnx_path, engine, args, res):
    report = engine + ".report.json"
    cmd = [args.engine_build, config, "--set", f"model={onnx_path}", "--output", engine, "--report", report,
           "--no-bench"]
    print("  $ " + " ".join(cmd), flush=True)
    proc, secs = run_cmd(cmd, args.timeout)
    ok = proc.returncode == 0 and os.path.exists(engine)
    res.record(f"[build] {name} (attention required)", ok,
               f"{secs:.1f} s" if ok else f"exit {proc.returncode}\n{tail(proc.stderr)}")
    return report if ok else None


def check_report(name, report, profiles, layers, res):
    problems = []
    try:
        with open(report) as f:
            rep = json.load(f)
        for p in profiles:
            fu = rep["profiles"][p]["fusions"]
            if fu.get("attention") != layers:
                problems.append(f"{p}: {fu.get('attention')} fused sites, expected {layers}")
            if fu.get("unfused"):
                problems.append(f"{p}: unfused {fu['unfused']}")
            for s in fu.get("sites", []):
                # The fused node is named after its Softmax: <scope>/Attention replaced <scope>/Softmax.
                softmax = s.get("node", "").rsplit("/", 1)[0] + "/Softmax"
                if softmax not in s.get("replaced", []):
                    problems.append(f"{p}: site {s.get('node')} does not list {softmax} among {s.get('replaced')}")
            print(f"    {p}: {fu.get('attention')} fused: " + ", ".join(s.get("node", "?") for s in fu.get("sites", [])),
                  flush=True)
    except Exception as e:  # noqa: BLE001 - any malformed report is a failure
        problems.append(f"{type(e).__name__}: {e}")
    res.record(f"[report] {name}: {layers} fused per profile, none unfused", not problems, "; ".join(problems))


def compare(name, engine, profile, case, inputs, expected, out_dir, args, res):
    cmd = [args.engine_run, engine, "--profile", profile]
    for n, p in inputs.items():
        cmd += ["--input", f"{n}={p}"]
    cmd += ["--output-dir", out_dir, "--iterations", "2"]  # outputs of a steady-state (arena) run
    proc, secs = run_cmd(cmd, args.timeout)
    label = f"[engine] {name} {profile} {case}"
    if proc.returncode != 0:
        res.record(label, False, f"engine-run exit {proc.returncode}: {tail(proc.stderr)}")
        return
    problems, errs = [], []
    for out, want in expected.items():
        path = os.path.join(out_dir, export_models.sanitize(out) + ".npy")
        if not os.path.exists(path):
            problems.append(f"{out}: no output file")
            continue
        got = np.load(path)
        if got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"{out}: {got.dtype} {list(got.shape)} instead of {want.dtype} {list(want.shape)}")
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
        errs.append(f"{out} {err:.1e}")
        if not np.allclose(got, want, atol=ATOL, rtol=RTOL):
            problems.append(f"{out}: max abs err {err:.3e}")
    res.record(label, not problems, f"{secs:.2f} s; max abs err " + ", ".join(errs) + ("; " + "; ".join(problems) if problems else ""))


def kiln_model(name, args, res):
    spec = export_models.spec_for(name, "small")
    m = KILN_MODELS[name]
    work = os.path.join(args.workdir, name)
    onnx_path = os.path.join(work, f"{name}.small.onnx")
    ref = os.path.join(work, "ref")
    cases = [c for cs in m["profiles"].values() for c in cs]
    cmd = [sys.executable, os.path.join(MODELS_DIR, "export_models.py"), name, "--size", "small", "--out", onnx_path,
           "--reference-dir", ref, "--quiet", "--case"] + cases
    proc, _ = run_cmd(cmd, args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"export failed: {tail(proc.stderr)}")
    engine = os.path.join(work, f"{name}.small.engine")
    report = build(name, os.path.join(CONFIGS_DIR, m["config"]), onnx_path, engine, args, res)
    if not report:
        return
    check_report(name, report, list(m["profiles"]), m["layers"], res)
    for profile, cs in m["profiles"].items():
        for case in cs:
            d = os.path.join(ref, export_models.sanitize(case))
            inputs = {n: os.path.join(d, "inputs", export_models.sanitize(n) + ".npy") for n in spec.input_names}
            expected = {o: np.load(os.path.join(d, "expected", export_models.sanitize(o) + ".npy"))
                        for o in spec.output_names}
            compare(name, engine, profile, case, inputs, expected, os.path.join(work, "out", export_models.sanitize(case)),
                    args, res)


def variant(name, args, res):
    spec = attention_variants.VARIANTS[name]
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, name + ".onnx")
    model = attention_variants.export(name, onnx_path)
    engine = os.path.join(work, name + ".engine")
    config = os.path.join(work, name + ".yaml")
    with open(config, "w") as f:
        f.write(spec.config(onnx_path, engine))
    report = build(name, config, onnx_path, engine, args, res)
    if not report:
        return
    check_report(name, report, list(spec.CASES), 2, res)
    for profile, cases in spec.CASES.items():
        for dims in cases:
            case = ",".join(f"{k}={v}" for k, v in dims.items())
            arrays = spec.make_inputs(**dims)
            d = os.path.join(work, "cases", export_models.sanitize(case))
            inputs = save_npys(os.path.join(d, "inputs"), arrays)
            expected = attention_variants.run(model, spec, arrays)
            compare(name, engine, profile, case, inputs, expected, os.path.join(d, "out"), args, res)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-build", required=True)
    p.add_argument("--engine-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--timeout", type=float, default=900, help="seconds per command")
    names = list(KILN_MODELS) + list(attention_variants.VARIANTS)
    p.add_argument("--only", action="append", choices=names, help="only these models (default: all)")
    args = p.parse_args()
    args.engine_build = os.path.abspath(args.engine_build)
    args.engine_run = os.path.abspath(args.engine_run)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    res = Results()
    for name in args.only or names:
        print(f"== {name}", flush=True)
        try:
            (kiln_model if name in KILN_MODELS else variant)(name, args, res)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            traceback.print_exc()
            res.record(f"[{name}] setup", False, f"{type(e).__name__}: {e}")
    print(f"{res.passed} passed, {len(res.failed)} failed", flush=True)
    for n in res.failed:
        print(f"  FAILED {n}", flush=True)
    sys.exit(1 if res.failed else 0)


if __name__ == "__main__":
    main()
