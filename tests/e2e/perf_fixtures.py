"""Shared by the engine-perf end-to-end tests: the small ControlTransformer export, an engine-build
run that records into a history, and synthetic engine-build reports (the report format of
schema_version 1) for histories with a known shape."""
import hashlib
import json
import math
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SMALL_CONFIG = os.path.join(HERE, "configs", "control_transformer_small.yaml")


def export_small_model(workdir):
    sys.path.insert(0, os.path.join(REPO, "models"))
    import export_models  # noqa: E402
    path = os.path.join(workdir, "control_transformer.small.onnx")
    if not os.path.exists(path):
        export_models.export("control_transformer", "small", path)
    return path


def engine_build(engine_build_bin, model, engine, *extra, iterations=12):
    cmd = [engine_build_bin, SMALL_CONFIG, "--set", f"model={model}", "--output", engine, "--report", engine + ".report.json",
           "--set", f"benchmark.iterations={iterations}", "--set", "benchmark.warmup=2", "--set", "streaming.steps=4", *extra]
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def synthetic_report(path, *, index, p50s, machine="fixture-machine-1", label="", layers=None, t0=1.79e9, seed=0, budget=100.0):
    """A report as engine-build writes it, with log-normal samples around each profile's p50."""
    rng = random.Random(seed * 1000 + index)
    fp = hashlib.sha256(machine.encode()).hexdigest()[:16]
    profiles = {}
    for name, p50 in p50s.items():
        samples = [p50 * math.exp(rng.gauss(0, 0.02)) for _ in range(30)]
        lay = layers(name, index) if layers else [("/blocks.0/attn/Attention", "kiln::Attention", [], p50 * 0.3),
                                                  ("/blocks.0/mlp/fc1", "FusedMatMul", [], p50 * 0.5)]
        profiles[name] = {
            "budget_ms": budget, "samples_ms": samples, "gflop": 1.0, "gflops_per_s": 1000 / p50, "peak_fraction": 0.5,
            "layer_runs": 3,
            "all_layers": [{"name": n, "op_type": o, "replaced": r, "ms": [ms * math.exp(rng.gauss(0, 0.01)) for _ in range(3)]}
                           for n, o, r, ms in lay],
        }
    t = t0 + index * 3600
    report = {
        "schema_version": 1,
        "run": {"time": "", "unix_time": t, "label": label,
                "kiln": {"version": "0.1.0", "commit": "%040x" % index, "dirty": False},
                "config": {"path": "/fixtures/configs/fixture.yaml", "series": "configs/fixture.yaml", "sha256": "0" * 64,
                           "repo_commit": "%040x" % (index + 1000), "repo_dirty": False},
                "model_sha256": "1" * 64, "engine_sha256": "2" * 64, "precision": "fp32", "threads": 2,
                "load_average": {"before": [0.5, 0.5, 0.5], "after": [0.6, 0.5, 0.5]}},
        "engine": {"path": "/fixtures/fixture.engine"},
        "machine": {"cpu_model": machine, "isa": ["avx2", "avx512f"], "cores": 2, "memory_bytes": 24 << 30, "fingerprint": fp},
        "profiles": profiles,
    }
    with open(path, "w") as f:
        json.dump(report, f)
    return path


class Results:
    def __init__(self):
        self.passed, self.failed = 0, []

    def check(self, name, problems):
        problems = [p for p in problems if p]
        print(f"{'FAIL' if problems else 'PASS'} {name}{': ' + '; '.join(problems) if problems else ''}", flush=True)
        if problems:
            self.failed.append(name)
        else:
            self.passed += 1

    def finish(self):
        print(f"{self.passed} passed, {len(self.failed)} failed")
        return 1 if self.failed else 0
