#!/usr/bin/python3
"""An external plugin library through the command-line tools: a model with an example::ScaledTanh
node (made with onnx.helper) is built with `plugins: {load: [...]}`, run by engine-run and compared
with numpy; the failure cases exit non-zero with exactly one line on stderr naming the problem.

  test_plugin_library.py --engine-build PATH --engine-run PATH --plugin LIB --bad-api-plugin LIB --workdir DIR"""
import argparse
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def make_model(path, domain="example", op="ScaledTanh"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    nodes = [helper.make_node(op, ["x"], ["t"], name="scaled", domain=domain, alpha=1.5, beta=0.75),
             helper.make_node("Mul", ["t", "t"], ["y"], name="square")]
    graph = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]), path)


def config(work, name, model, libs):
    text = f"model: {model}\noutput: {name}.engine\nprofiles:\n  p:\n    dims: {{n: {{min: 1, opt: 2, max: 8}}}}\n"
    if libs:
        text += "plugins: {load: [" + ", ".join(libs) + "]}\n"
    path = work / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-run", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--bad-api-plugin", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.engine_build, a.engine_run = str(pathlib.Path(a.engine_build).resolve()), str(pathlib.Path(a.engine_run).resolve())
    work = pathlib.Path(a.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "lib").mkdir(parents=True)
    lib = work / "lib" / "libscaled_tanh.so"
    shutil.copy(a.plugin, lib)
    shutil.copy(a.bad_api_plugin, work / "lib" / "libbad_api.so")
    make_model(str(work / "st.onnx"))
    make_model(str(work / "acme.onnx"), "acme", "Frobnicate")
    failures = 0

    def check(label, ok, detail=""):
        nonlocal failures
        print(("PASS " if ok else "FAIL ") + label + ("" if ok else ": " + detail))
        failures += 0 if ok else 1

    # Build, then run at a shape other than opt, in a fresh process that loads the recorded library.
    b = subprocess.run([a.engine_build, config(work, "good", "st.onnx", ["lib/libscaled_tanh.so"]), "--no-bench"],
                       capture_output=True, text=True, cwd=work)
    check("build with the plugin", b.returncode == 0, b.stderr)
    x = np.linspace(-3, 3, 5 * 4, dtype=np.float32).reshape(5, 4)
    np.save(work / "x.npy", x)
    r = subprocess.run([a.engine_run, str(work / "good.engine"), "--profile", "p", "--input", f"x={work / 'x.npy'}",
                        "--output-dir", str(work / "out"), "--plugin-dir", str(work / "lib")], capture_output=True, text=True)
    check("engine-run", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        y = np.load(work / "out" / "y.npy")
        want = np.square(1.5 * np.tanh(0.75 * x))
        check("outputs match numpy", y.shape == want.shape and np.allclose(y, want, rtol=1e-5, atol=1e-6),
              f"max abs err {np.abs(y - want).max() if y.shape == want.shape else y.shape}")
    i = subprocess.run([a.engine_run, "--inspect", str(work / "good.engine"), "--plugin-dir", str(work / "lib")], capture_output=True, text=True)
    check("inspect shows the plugin layer", i.returncode == 0 and "plugin" in i.stdout, i.stdout + i.stderr)

    def expect_error(label, cmd, needles, cwd=work):
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        # engine-build's progress lines ("[engine-build] ...") precede the error.
        lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("[engine-build]")]
        err = lines[0] if len(lines) == 1 else p.stderr.strip()
        ok = p.returncode > 0 and len(lines) == 1 and "internal error" not in err
        ok = ok and all(n in err for n in needles)
        check(f"{label}: {err}", ok, f"rc={p.returncode} stderr={p.stderr!r}")

    expect_error("unregistered custom op", [a.engine_build, config(work, "acme", "acme.onnx", []), "--no-bench"],
                 ["node 'scaled' (acme::Frobnicate)", "plugins: {load: [...]}"])
    expect_error("plugin op without its library", [a.engine_build, config(work, "nolib", "st.onnx", []), "--no-bench"],
                 ["example::ScaledTanh", "plugins: {load: [...]}"])
    expect_error("missing library", [a.engine_build, config(work, "missing", "st.onnx", ["lib/nope.so"]), "--no-bench"],
                 [str(work / "lib" / "nope.so")])
    expect_error("wrong API version", [a.engine_build, config(work, "badapi", "st.onnx", ["lib/libbad_api.so"]), "--no-bench"],
                 [str(work / "lib" / "libbad_api.so"), "version 999", "version 2"])
    expect_error("engine whose library is not on the search path", [a.engine_run, "--inspect", str(work / "good.engine")],
                 ["'kiln example plugins' version 1.0", "libscaled_tanh.so", "not found on the plugin search path", str(lib)])
    lib.rename(work / "moved.so")
    expect_error("engine-run whose library moved", [a.engine_run, str(work / "good.engine"), "--profile", "p", "--input",
                                                    f"x={work / 'x.npy'}", "--output-dir", str(work / "out2"), "--plugin-dir",
                                                    str(work / "lib")], ["'kiln example plugins' version 1.0", str(work / "lib")])
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
