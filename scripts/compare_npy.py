#!/usr/bin/python3
"""Compares kiln's outputs (GOT_DIR/<name>.npy) with reference outputs (WANT_DIR/<name>.npy).

  compare_npy.py WANT_DIR GOT_DIR [--atol 1e-4] [--rtol 1e-3]

Prints the max abs error per output; exits 1 if WANT_DIR holds no .npy file, an output is missing,
has another dtype or shape, or is out of tolerance. The comparison is the end-to-end tests' own
(tests/e2e/kiln_e2e.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "e2e"))

import kiln_e2e  # noqa: E402

if __name__ == "__main__":
    sys.exit(kiln_e2e.compare_cli(prog="compare_npy.py"))
