#!/usr/bin/python3
"""Export kiln's test models from PyTorch to ONNX (legacy tracing exporter, opset 17), and optionally
write reference cases (inputs and PyTorch's outputs as .npy) for the end-to-end tests.

  /usr/bin/python3 models/export_models.py MODEL --out PATH.onnx [--size small|full]
      [--reference-dir DIR --case NAME ...]

A case may also be parameterized, KIND:K=V,... (e.g. full:T=5, incremental:T=1,cached=3 for
control_transformer; prefill:seq=16, decode:seq=1,past=24 for gpt2), written to DIR/full_T_5 etc.

MODEL: control_transformer, gpt2, resnet18, vit. Weights are random with fixed seeds, so every run
writes the same model and the same reference data. Cases write DIR/NAME/inputs/<input>.npy and
DIR/NAME/expected/<output>.npy (names sanitized: characters outside [A-Za-z0-9._-] become '_').
See models/README.md.
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import control_transformer  # noqa: E402
import gpt2_decoder  # noqa: E402
import resnet18  # noqa: E402
import vit  # noqa: E402

OPSET = 17


class Spec:
    """What export and reference writing need to know about one model."""

    def __init__(self, module, input_names, output_names, dynamic_axes):
        self.module = module
        self.input_names = input_names
        self.output_names = output_names
        self.dynamic_axes = dynamic_axes
        self.cases = module.CASES


def spec_for(model, size):
    if model == "control_transformer":
        m = control_transformer
        return Spec(m, m.INPUT_NAMES, m.OUTPUT_NAMES, m.dynamic_axes())
    if model == "gpt2":
        m = gpt2_decoder
        return Spec(m, m.input_names(size), m.output_names(size), m.dynamic_axes(size))
    if model in ("resnet18", "vit"):
        m = resnet18 if model == "resnet18" else vit
        return Spec(m, m.INPUT_NAMES, m.OUTPUT_NAMES, m.dynamic_axes())
    raise ValueError(f"unknown model {model!r}")


MODELS = ["control_transformer", "gpt2", "resnet18", "vit"]


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def export(model_name, size, out_path):
    spec = spec_for(model_name, size)
    model = spec.module.build_model(size)
    args = spec.module.trace_inputs(size)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    # Grad stays enabled while tracing: under no_grad, eval-mode nn.MultiheadAttention takes the
    # _native_multi_head_attention fast path, which the legacy exporter cannot export (see vit.py).
    with torch.enable_grad():
        torch.onnx.export(
            model, args, out_path,
            input_names=spec.input_names,
            output_names=spec.output_names,
            dynamic_axes=spec.dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
        )
    check_export(out_path, spec)
    return model, spec


def check_export(path, spec):
    """The graph is valid ONNX, has exactly the declared inputs/outputs, and every dynamic axis is symbolic."""
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ios = {v.name: v for v in list(m.graph.input) + list(m.graph.output)}
    got_in = [v.name for v in m.graph.input]
    got_out = [v.name for v in m.graph.output]
    if got_in != spec.input_names or got_out != spec.output_names:
        raise RuntimeError(f"{path}: inputs {got_in} / outputs {got_out} differ from {spec.input_names} / "
                           f"{spec.output_names}")
    for name, axes in spec.dynamic_axes.items():
        dims = ios[name].type.tensor_type.shape.dim
        for axis, dim_name in axes.items():
            if dims[axis].dim_param != dim_name:
                raise RuntimeError(f"{path}: {name} dim {axis} is {dims[axis]} instead of symbolic {dim_name!r}")


def describe(path):
    m = onnx.load(path)
    lines = []
    for kind, vals in (("input", m.graph.input), ("output", m.graph.output)):
        for v in vals:
            t = v.type.tensor_type
            dims = [d.dim_param or d.dim_value for d in t.shape.dim]
            lines.append(f"  {kind} {v.name}: {onnx.TensorProto.DataType.Name(t.elem_type)} {dims}")
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    lines.append("  ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
    return "\n".join(lines)


def write_case(model, spec, size, case, reference_dir):
    inputs, expected = spec.module.make_case(model, size, case)
    for sub, arrays, names in (("inputs", inputs, spec.input_names), ("expected", expected, spec.output_names)):
        d = os.path.join(reference_dir, case, sub)
        os.makedirs(d, exist_ok=True)
        for name in names:
            np.save(os.path.join(d, sanitize(name) + ".npy"), np.ascontiguousarray(arrays[name]))
    return inputs, expected


def parse_param_case(spec, case):
    """'KIND:K=V,...' -> (KIND, {K: int(V)}), checked against the module's PARAM_CASES (KIND -> {param:
    default or None if required}). Raises ValueError naming what is wrong."""
    kinds = getattr(spec.module, "PARAM_CASES", {})
    kind, _, rest = case.partition(":")
    if kind not in kinds:
        raise ValueError(f"unknown parameterized case kind {kind!r}; kinds: {', '.join(kinds) or 'none'}")
    params = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in kinds[kind]:
            raise ValueError(f"case {case!r}: expected K=V with K in {', '.join(kinds[kind])}, got {item!r}")
        try:
            params[key] = int(value)
        except ValueError:
            raise ValueError(f"case {case!r}: {key} must be an integer, got {value!r}") from None
    for key, default in kinds[kind].items():
        if key not in params:
            if default is None:
                raise ValueError(f"case {case!r}: {key}= is required")
            params[key] = default
    return kind, params


def write_param_case(model, spec, size, case, reference_dir):
    """Like write_case for 'KIND:K=V,...'; the case's directory is sanitize(case), e.g. full_T_5."""
    kind, params = parse_param_case(spec, case)
    inputs, expected = spec.module.make_param_case(model, size, kind, params)
    for sub, arrays, names in (("inputs", inputs, spec.input_names), ("expected", expected, spec.output_names)):
        d = os.path.join(reference_dir, sanitize(case), sub)
        os.makedirs(d, exist_ok=True)
        for name in names:
            np.save(os.path.join(d, sanitize(name) + ".npy"), np.ascontiguousarray(arrays[name]))
    return inputs, expected


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=MODELS)
    p.add_argument("--out", required=True, help="path of the .onnx file to write")
    p.add_argument("--size", choices=["small", "full"], default="full")
    p.add_argument("--reference-dir", help="write reference cases under this directory")
    p.add_argument("--case", action="extend", nargs="+", default=[],
                   help="reference case to write (repeatable; default with --reference-dir: all cases); "
                        "also KIND:K=V,... at chosen shapes: control_transformer full:T=5, "
                        "incremental:T=1,cached=3; gpt2 prefill:seq=16, decode:seq=1,past=24 "
                        "(written to DIR/<case with : = , replaced by _>)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)

    start = time.perf_counter()
    model, spec = export(a.model, a.size, a.out)
    elapsed = time.perf_counter() - start
    if not a.quiet:
        print(f"{a.model} ({a.size}) -> {a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB in {elapsed:.1f} s")
        print(describe(a.out))
    cases = a.case or (spec.cases if a.reference_dir else [])
    if cases and not a.reference_dir:
        p.error("--case needs --reference-dir")
    for case in cases:
        if ":" in case:
            try:
                write_param_case(model, spec, a.size, case, a.reference_dir)
            except ValueError as e:
                p.error(f"{a.model}: {e}")
            if not a.quiet:
                print(f"  case {case} -> {os.path.join(a.reference_dir, sanitize(case))}")
            continue
        if case not in spec.cases:
            p.error(f"unknown case {case!r} for {a.model}; cases: {', '.join(spec.cases)}")
        write_case(model, spec, a.size, case, a.reference_dir)
        if not a.quiet:
            print(f"  case {case} -> {os.path.join(a.reference_dir, case)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
