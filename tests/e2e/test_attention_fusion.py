#!/usr/bin/python3
"""End-to-end test of attention fusion under ranged profiles: engine-build with `fusions: {attention:
required}` must fuse every attention layer of every profile, and the engine must match PyTorch.

  /usr/bin/python3 tests/e2e/test_attention_fusion.py --engine-build PATH --engine-run PATH --workdir DIR
      [--only NAME ...]

Models (small sizes):
  gpt2  tests/e2e/configs/gpt2_fusion_small.yaml: prefill (seq 1..128, past 0) and decode (seq 1,
        past 1..1024); 2 fused layers per profile; cases from `export_models.py --case`.
  vit   tests/e2e/configs/vit_small.yaml: batch 1..2; 2 fused layers.
  the variants of models/attention_variants.py (its docstring lists them): attention written with
        other module code (Hugging Face GPT-2, sdpa, T5, grouped-query, masks built at run time, scales
        computed from sizes, ...); references from PyTorch in this process.
Checks per model: the build succeeds; the report lists, per profile, as many fused sites as the model
has layers, none unfused, each site naming the nodes it replaced (its Softmax among them); engine-run
--profile at shapes across each range (min, between, max) matches PyTorch (kiln_e2e.compare_arrays:
atol 1e-4, rtol 1e-3).
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402  (puts models/ on the path)
from kiln_e2e import tail  # noqa: E402
import attention_variants  # noqa: E402  (models/)
import export_models  # noqa: E402

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


def build(name, config, onnx_path, engine, args, res):
    report = engine + ".report.json"
    proc, secs = kiln_e2e.engine_build(args.engine_build, config, engine, model=onnx_path, report=report,
                                       timeout=args.timeout)
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


def kiln_model(name, args, res):
    m = KILN_MODELS[name]
    work = os.path.join(args.workdir, name)
    onnx_path = os.path.join(work, f"{name}.small.onnx")
    ref = os.path.join(work, "ref")
    cases = [c for cs in m["profiles"].values() for c in cs]
    kiln_e2e.export_model(name, "small", onnx_path, ref, cases, args.timeout)
    engine = os.path.join(work, f"{name}.small.engine")
    report = build(name, os.path.join(kiln_e2e.CONFIGS_DIR, m["config"]), onnx_path, engine, args, res)
    if not report:
        return
    check_report(name, report, list(m["profiles"]), m["layers"], res)
    spec = export_models.spec_for(name, "small")
    for profile, cs in m["profiles"].items():
        for case in cs:
            inputs, expected = kiln_e2e.reference_case(ref, case, spec)
            kiln_e2e.run_and_compare(res, f"[engine] {name} {profile} {case}", args.engine_run, engine, inputs, expected,
                                     os.path.join(work, "out", export_models.sanitize(case)), profile=profile,
                                     timeout=args.timeout)


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
    check_report(name, report, list(spec.CASES), spec.LAYERS, res)
    for profile, cases in spec.CASES.items():
        for dims in cases:
            case = ",".join(f"{k}={v}" for k, v in dims.items())
            arrays = spec.make_inputs(**dims)
            d = os.path.join(work, "cases", export_models.sanitize(case))
            inputs = kiln_e2e.save_npys(os.path.join(d, "inputs"), arrays)
            expected = attention_variants.run(model, spec, arrays)
            kiln_e2e.run_and_compare(res, f"[engine] {name} {profile} {case}", args.engine_run, engine, inputs, expected,
                                     os.path.join(d, "out"), profile=profile, timeout=args.timeout)


def main():
    p = kiln_e2e.tool_parser(__doc__)
    names = list(KILN_MODELS) + list(attention_variants.VARIANTS)
    p.add_argument("--only", action="append", choices=names, help="only these models (default: all)")
    args = kiln_e2e.parse_tool_args(p)
    res = kiln_e2e.Results()
    for name in args.only or names:
        print(f"== {name}", flush=True)
        try:
            (kiln_model if name in KILN_MODELS else variant)(name, args, res)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            traceback.print_exc()
            res.record(f"[{name}] setup", False, f"{type(e).__name__}: {e}")
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
