#!/usr/bin/python3
"""The conformance runner's expected-failures list must mean what it says: a listed test passes as
an expected failure only when it fails at the listed stage with the listed message. Runs
onnx_conformance on a few tests of the ONNX backend data with crafted lists and checks the exit
status and the line that explains it.

  /usr/bin/python3 tests/conformance/test_expected_failures.py --conformance PATH --data DIR --workdir DIR
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))

import kiln_e2e  # noqa: E402

DROPOUT = "node/test_training_dropout_mask"  # fails at run time: training_mode=true is not supported
ABS = "node/test_abs"                        # passes

# (name, list text, --filter, expected exit status, text the output must contain)
CASES = [
    ("the listed stage and message: an expected failure",
     f'{DROPOUT} run-error "training_mode=true with ratio" # training\n', DROPOUT, 0, "1 expected failures"),
    ("another stage fails the run",
     f'{DROPOUT} build-error "training_mode=true with ratio" # training\n', DROPOUT, 1,
     "listed as failing with build-error"),
    ("another message fails the run",
     f'{DROPOUT} run-error "unsupported attribute" # training\n', DROPOUT, 1, "but failed with run-error"),
    ("a listed test that passes fails the run",
     f'{ABS} wrong-output "element" # not really\n', ABS, 1, "but passes: remove it from the list"),
    ("a listed test that does not exist fails the run",
     'node/test_no_such_test build-error "x" # gone\n', "node/test_no_such", 1, "no such test exists"),
    ("a crash is no stage a list may name", f'{ABS} crash "signal" # no\n', ABS, 1, "is not a failure stage"),
    ("an entry without a quoted message is malformed", f'{ABS} wrong-output # no message\n', ABS, 1,
     "no quoted, non-empty message substring"),
    ("an entry without a reason is malformed", f'{ABS} wrong-output "element"\n', ABS, 1, "has no reason"),
    ("an entry listed twice is malformed",
     f'{DROPOUT} run-error "training" # a\n{DROPOUT} run-error "training" # b\n', DROPOUT, 1, "is listed twice"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conformance", required=True, help="path of the onnx_conformance binary")
    ap.add_argument("--data", default="/usr/share/libonnx-testdata/data")
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    res = kiln_e2e.Results()
    for i, (name, text, flt, want_rc, want_text) in enumerate(CASES):
        path = os.path.join(a.workdir, f"list_{i}.txt")
        with open(path, "w") as f:
            f.write(text)
        proc, _ = kiln_e2e.run_cmd([a.conformance, "--data", a.data, "--expected-failures", path, "--filter", flt], 300)
        out = proc.stdout + proc.stderr
        problems = [] if proc.returncode == want_rc else [f"exit {proc.returncode}, expected {want_rc}"]
        if want_text not in out:
            problems.append(f"output lacks {want_text!r}: {kiln_e2e.tail(out, 800)}")
        res.check(name, problems)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
