#!/usr/bin/python3
"""The malformed-input corpus (tests/malformed/, written by make_corpus.py): every case must end
with exit status 1 and exactly one line on stderr that names the file and says what is wrong; no
signal, no internal error, nothing the user gave changed, no stray file left behind.

  test_malformed_inputs.py --engine-run PATH --engine-build PATH --workdir DIR [--plugin LIB]

Each case runs in a fresh copy of the corpus; afterwards the copy must hold exactly the files it
started with, byte for byte, plus (for engine-run) an empty or absent output folder. With
--plugin, one more case: an engine that names a plugin library the caller did not allow."""
import argparse
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
MALFORMED = HERE.parent / "malformed"


def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def run_case(c, tools, work):
    scratch = work / c["name"].replace("/", "_")
    if scratch.exists():
        shutil.rmtree(scratch)
    corpus = scratch / "corpus"
    shutil.copytree(MALFORMED / "corpus", corpus)
    before = snapshot(scratch)
    out = scratch / "out"
    subst = {"corpus": str(corpus), "ok_model": str(corpus / "ok_add.onnx"), "ok_x": str(corpus / "ok_x.npy"), "out": str(out)}
    cmd = [tools[c["tool"]]] + [a.format(**subst) for a in c["args"]]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=scratch)
    except subprocess.TimeoutExpired:
        return f"timed out: {' '.join(cmd)}"
    problems = []
    if r.returncode != 1:
        problems.append(f"exit status {r.returncode} (want 1)")
    lines = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith("[engine-build]")]
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines (want 1): {lines[:3]}")
    msg = lines[0] if lines else ""
    if "internal error" in msg:
        problems.append("internal error")
    for word in c["expect"]:
        if word not in msg:
            problems.append(f"message lacks '{word}'")
    # engine-build configs write to corpus/out/ (an empty folder may stay); engine-run to out/.
    in_out = lambda k: k in ("out", "corpus/out") or k.startswith("out/") or k.startswith("corpus/out/")
    now = snapshot(scratch)
    left = sorted(k for k, v in now.items() if in_out(k) and v != "dir")
    if left:
        problems.append(f"left files in an output folder: {left}")
    changed = sorted(k for k in before if now.get(k) != before[k])
    added = sorted(k for k in now if k not in before and not in_out(k))
    if changed:
        problems.append(f"changed: {changed}")
    if added:
        problems.append(f"stray files: {added}")
    if problems:
        return f"{'; '.join(problems)}\n      cmd: {' '.join(cmd)}\n      stderr: {r.stderr.strip()[:400]}"
    shutil.rmtree(scratch)
    return None


def plugin_case(tools, plugin, work):
    """An engine built with the example plugin, run without allowing its library."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    d = work / "untrusted_plugin"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("ScaledTanh", ["x"], ["y"], name="st", domain="example", alpha=1.5, beta=0.5)
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example", 1)])
    onnx.save(m, d / "m.onnx")
    (d / "c.yaml").write_text(f"model: m.onnx\noutput: m.engine\nplugins: {{load: [{plugin}]}}\nprofiles:\n  p: {{dims: {{}}}}\n")
    r = subprocess.run([tools["engine-build"], str(d / "c.yaml"), "--no-bench"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"could not build the plugin engine: {r.stderr.strip()[-400:]}"
    np.save(d / "x.npy", np.ones((2, 3), np.float32))
    r = subprocess.run([tools["engine-run"], str(d / "m.engine"), "--input", f"x={d / 'x.npy'}", "--output-dir", str(d / "out")],
                       capture_output=True, text=True, timeout=120)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    if r.returncode != 1 or len(lines) != 1 or "has not allowed" not in lines[0] or (d / "out").exists():
        return f"untrusted plugin: exit {r.returncode}, stderr {r.stderr.strip()[:400]}"
    r = subprocess.run([tools["engine-run"], str(d / "m.engine"), "--plugin", plugin, "--input", f"x={d / 'x.npy'}", "--output-dir",
                        str(d / "out")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"allowed plugin: exit {r.returncode}, stderr {r.stderr.strip()[:400]}"
    shutil.rmtree(d)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--plugin")
    a = ap.parse_args()
    work = pathlib.Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    tools = {"engine-run": str(pathlib.Path(a.engine_run).resolve()), "engine-build": str(pathlib.Path(a.engine_build).resolve())}
    a.plugin = str(pathlib.Path(a.plugin).resolve()) if a.plugin else None
    cases = json.loads((MALFORMED / "cases.json").read_text())
    files = [p for p in (MALFORMED / "corpus").iterdir()]
    failed = 0
    for c in cases:
        err = run_case(c, tools, work)
        print(f"{'FAIL' if err else 'ok  '} {c['name']}{': ' + err if err else ''}")
        failed += bool(err)
    passed = len(cases) - failed
    if a.plugin:
        err = plugin_case(tools, a.plugin, work)
        print(f"{'FAIL' if err else 'ok  '} engine naming an unallowed plugin library{': ' + err if err else ''}")
        failed += bool(err)
        passed += not err
    print(f"corpus: {len(files)} files, {len(cases)} cases")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or len(files) < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
