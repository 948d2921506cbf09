#!/usr/bin/python3
"""Compares kiln's outputs (DIR_GOT/<name>.npy) with reference outputs (DIR_WANT/<name>.npy).

  compare_npy.py WANT_DIR GOT_DIR [--atol 1e-4] [--rtol 1e-3]

Prints the max abs error per output; exits 1 if any output is missing or out of tolerance."""
import argparse
import pathlib
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("want")
    ap.add_argument("got")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()
    ok = True
    for want_path in sorted(pathlib.Path(a.want).glob("*.npy")):
        got_path = pathlib.Path(a.got) / want_path.name
        if not got_path.exists():
            print(f"MISSING {want_path.stem}: {got_path} was not written")
            ok = False
            continue
        want, got = np.load(want_path), np.load(got_path)
        if want.shape != got.shape:
            print(f"FAIL {want_path.stem}: shape {got.shape}, expected {want.shape}")
            ok = False
            continue
        err = float(np.max(np.abs(want.astype(np.float64) - got.astype(np.float64)))) if want.size else 0.0
        good = np.allclose(got, want, atol=a.atol, rtol=a.rtol, equal_nan=True)
        ok &= bool(good)
        print(f"{'PASS' if good else 'FAIL'} {want_path.stem}: shape {list(got.shape)}, max abs err {err:.3g} "
              f"(atol {a.atol}, rtol {a.rtol})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
