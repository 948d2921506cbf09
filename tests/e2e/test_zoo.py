#!/usr/bin/python3
"""End-to-end test: kiln's engine-run against PyTorch on a few small models of the torchvision zoo
(models/torchvision_zoo.py at 64x64): squeeze-excite with SiLU and with HardSwish, channel shuffle,
fire modules and DenseNet's standalone BatchNorms, i.e. the generic kernels and the fusions off the
transformer fast path (batchnorm_folding, conv epilogue activations, elementwise_fusion).

  /usr/bin/python3 tests/e2e/test_zoo.py --engine-run PATH/TO/engine-run --workdir DIR [--only NAME ...]

Each model's logits must match PyTorch's within atol 1e-4 (rtol 1e-3, as the other export tests).
The last line is `N passed, N failed`; the exit status is non-zero if anything failed.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "models"))

import torchvision_zoo  # noqa: E402

SMALL = ["efficientnet_b0", "mobilenet_v3_small", "shufflenet_v2_x1_0", "squeezenet1_1", "densenet121"]
ATOL, RTOL = 1e-4, 1e-3


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", action="append", default=[])
    a = p.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    passed, failed = 0, []
    for name in a.only or SMALL:
        try:
            onnx_path = torchvision_zoo.export(name, a.workdir, 64, quiet=True)
            case = os.path.join(a.workdir, "cases", name)
            out = os.path.join(a.workdir, "out", name)
            os.makedirs(out, exist_ok=True)
            cmd = [a.engine_run, onnx_path, "--input", "input=" + os.path.join(case, "inputs", "input.npy"), "--output-dir", out]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"engine-run failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
            got = np.load(os.path.join(out, "logits.npy"))
            want = np.load(os.path.join(case, "expected", "logits.npy"))
            err = float(np.max(np.abs(got - want)))
            ok = got.shape == want.shape and np.allclose(got, want, atol=ATOL, rtol=RTOL)
            print(f"{'PASS' if ok else 'FAIL'} {name}: max abs error {err:.3g} (|logits| up to {np.max(np.abs(want)):.3g})", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported by name
            ok = False
            print(f"FAIL {name}: {e}", flush=True)
        if ok:
            passed += 1
        else:
            failed.append(name)
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
