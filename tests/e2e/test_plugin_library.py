#!/usr/bin/python3
"""An external plugin library through the command-line tools: a model with an example::ScaledTanh
node (made with onnx.helper) is built with `plugins: {load: [...]}`, run by engine-run and compared
with numpy; the failure cases exit non-zero with exactly one line on stderr naming the problem.

  test_plugin_library.py --engine-build PATH --engine-run PATH --plugin LIB --bad-api-plugin LIB --workdir DIR"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln_e2e  # noqa: E402


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
    ap = kiln_e2e.tool_parser(__doc__, timeout=None)
    ap.add_argument("--plugin", required=True, help="the example plugin library")
    ap.add_argument("--bad-api-plugin", required=True, help="a plugin library built for another API version")
    a = kiln_e2e.parse_tool_args(ap)
    work = pathlib.Path(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "lib").mkdir(parents=True)
    lib = work / "lib" / "libscaled_tanh.so"
    shutil.copy(a.plugin, lib)
    shutil.copy(a.bad_api_plugin, work / "lib" / "libbad_api.so")
    make_model(str(work / "st.onnx"))
    make_model(str(work / "acme.onnx"), "acme", "Frobnicate")
    res = kiln_e2e.Results()

    def check(label, ok, detail=""):
        res.record(label, ok, "" if ok else detail)

    # Build, then run at a shape other than opt, in a fresh process that loads the recorded library.
    b = subprocess.run([a.engine_build, config(work, "good", "st.onnx", ["lib/libscaled_tanh.so"]), "--no-bench"],
                       capture_output=True, text=True, cwd=work)
    check("build with the plugin", b.returncode == 0, b.stderr)
    x = np.linspace(-3, 3, 5 * 4, dtype=np.float32).reshape(5, 4)
    np.save(work / "x.npy", x)
    r = subprocess.run([a.engine_run, str(work / "good.engine"), "--plugin-dir", str(work / "lib"), "--profile", "p", "--input",
                        f"x={work / 'x.npy'}", "--output-dir", str(work / "out")], capture_output=True, text=True)
    check("engine-run", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        problems, errors = kiln_e2e.compare_outputs({"y": np.square(1.5 * np.tanh(0.75 * x))}, work / "out", 1e-6, 1e-5)
        res.check("outputs match numpy", problems, "max abs err " + ", ".join(errors))
    i = subprocess.run([a.engine_run, "--plugin", str(lib), "--inspect", str(work / "good.engine")], capture_output=True, text=True)
    # The layer table row: index, op, kernel, name.
    check("inspect shows the plugin layer", i.returncode == 0 and bool(re.search(r"^\s+0\s+ScaledTanh\s+plugin\s+scaled$", i.stdout, re.M)),
          i.stdout + i.stderr)

    def expect_error(label, cmd, needles, cwd=work):
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
        res.check(label, kiln_e2e.one_line_error_problems(p, needles), p.stderr.strip())

    expect_error("unregistered custom op", [a.engine_build, config(work, "acme", "acme.onnx", []), "--no-bench"],
                 ["node 'scaled' (acme::Frobnicate)", "plugins: {load: [...]}"])
    expect_error("plugin op without its library", [a.engine_build, config(work, "nolib", "st.onnx", []), "--no-bench"],
                 ["example::ScaledTanh", "plugins: {load: [...]}"])
    expect_error("missing library", [a.engine_build, config(work, "missing", "st.onnx", ["lib/nope.so"]), "--no-bench"],
                 [str(work / "lib" / "nope.so")])
    expect_error("wrong API version", [a.engine_build, config(work, "badapi", "st.onnx", ["lib/libbad_api.so"]), "--no-bench"],
                 [str(work / "lib" / "libbad_api.so"), "version 999", "version 1"])
    # An engine never makes engine-run open a library the command line did not allow.
    expect_error("engine-run without --plugin", [a.engine_run, "--inspect", str(work / "good.engine")], [str(lib), "has not allowed"])
    lib.rename(work / "moved.so")
    expect_error("engine whose library moved", [a.engine_run, "--plugin-dir", str(work / "lib"), "--inspect", str(work / "good.engine")], [str(lib)])
    expect_error("engine-run whose library moved", [a.engine_run, str(work / "good.engine"), "--plugin-dir", str(work / "lib"), "--profile",
                                                    "p", "--input", f"x={work / 'x.npy'}", "--output-dir", str(work / "out2")], [str(lib)])
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
