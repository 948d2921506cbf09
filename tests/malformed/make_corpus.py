#!/usr/bin/python3
"""Writes the malformed-input corpus (tests/malformed/corpus/) and its manifest (cases.json):
hand-broken ONNX models, YAML build configs, .npy and .pb inputs and engine files, each with the
command that reads it and words its one-line error must contain. Deterministic: re-running it
rewrites the same bytes. tests/e2e/test_malformed_inputs.py replays the manifest.

In a case's command, {corpus} is the corpus folder (copied into a scratch folder by the test),
{ok_model} a valid model (y = x + w, x float32 [n, 4]), {ok_x} a valid input for it and {out} an
output folder."""
import json
import pathlib
import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
cases = []


def case(name, file, tool, args, expect):
    cases.append({"name": name, "file": file, "tool": tool, "args": args, "expect": expect})


def save_model(name, nodes, inputs, outputs, inits=(), opset=17, ir=8, check=False):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    (CORPUS / name).write_bytes(m.SerializeToString())
    return name


def raw_tensor(name, dtype, dims, raw=None, floats=None):
    """A TensorProto as a file may hold it, without onnx.helper's size checks."""
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    return t


def vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def run_model(name, expect, inputs=("x={ok_x}",)):
    args = ["{corpus}/" + name]
    for i in inputs:
        args += ["--input", i]
    case(name, name, "engine-run", args + ["--output-dir", "{out}"], expect)


def models():
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    add = helper.make_node("Add", ["x", "w"], ["y"], name="add_w")
    save_model("ok_add.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [w])

    run_model(save_model("negative_dim.onnx", [add], [vi("x", [-5, 4])], [vi("y", ["n", 4])], [w]), ["'x'", "-5"])
    big = raw_tensor("big", TensorProto.FLOAT, [1 << 20, 1 << 20])
    run_model(save_model("huge_initializer_no_data.onnx", [helper.make_node("Add", ["x", "big"], ["y"], name="add_big")],
                         [vi("x", ["n", 4])], [vi("y", ["n", 4])], [big]), ["big"])
    huge_raw = raw_tensor("w", TensorProto.FLOAT, [1 << 31, 1 << 31, 1 << 31], raw=b"\x00" * 16)
    run_model(save_model("overflowing_initializer_dims.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [huge_raw]), ["'w'", "too large"])
    neg_init = raw_tensor("w", TensorProto.FLOAT, [-4])
    run_model(save_model("negative_initializer_dim.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [neg_init]), ["'w'", "negative"])
    short_raw = raw_tensor("w", TensorProto.FLOAT, [4], raw=b"\x00" * 10)
    run_model(save_model("raw_data_too_short.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [short_raw]), ["'w'", "raw_data"])
    typed_short = raw_tensor("w", TensorProto.FLOAT, [4], floats=[1.0, 2.0])
    run_model(save_model("typed_data_too_short.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [typed_short]), ["'w'", "2 values"])
    bad_type = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    bad_type.data_type = 999
    run_model(save_model("unknown_data_type.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [bad_type]), ["'w'", "999"])
    run_model(save_model("cyclic.onnx", [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")],
                         [vi("x", ["n", 4])], [vi("b", ["n", 4])]), ["n1", "'b'"])
    run_model(save_model("duplicate_output_name.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r1"), helper.make_node("Relu", ["x"], ["y"], name="r2")],
                         [vi("x", ["n", 4])], [vi("y", ["n", 4])]), ["'y'"])
    run_model(save_model("duplicate_initializer.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [w, w]), ["'w'"])
    run_model(save_model("dangling_input.onnx", [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")],
                         [vi("x", ["n", 4])], [vi("y", ["n", 4])]), ["ghost"])
    run_model(save_model("output_never_produced.onnx", [add], [vi("x", ["n", 4])], [vi("zz", ["n", 4])], [w]), ["zz"])
    run_model(save_model("input_listed_twice.onnx", [add], [vi("x", ["n", 4]), vi("x", ["n", 4])], [vi("y", ["n", 4])], [w]), ["'x'"])
    run_model(save_model("opset_99.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [w], opset=99), ["opset", "99"])
    run_model(save_model("opset_1.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [w], opset=1), ["opset"])
    run_model(save_model("unknown_op.onnx", [helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], [vi("x", ["n", 4])], [vi("y", ["n", 4])]),
              ["Frobnicate"])
    run_model(save_model("rank_9_input.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1] * 9)], [vi("y", [1] * 9)]), ["rank"])
    run_model(save_model("string_input.onnx", [helper.make_node("Identity", ["x"], ["y"], name="i")], [vi("x", ["n", 4], TensorProto.STRING)],
                         [vi("y", ["n", 4], TensorProto.STRING)]), ["'x'"])
    shape2 = numpy_helper.from_array(np.array([-1, -1], np.int64), "shape")
    run_model(save_model("reshape_two_minus_one.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")],
                         [vi("x", ["n", 4])], [vi("y", None)], [shape2]), ["rs"])
    idx = numpy_helper.from_array(np.array([7], np.int64), "idx")
    run_model(save_model("gather_index_out_of_range.onnx", [helper.make_node("Gather", ["x", "idx"], ["y"], name="ga", axis=1)],
                         [vi("x", ["n", 4])], [vi("y", None)], [idx]), ["ga"])
    wm = numpy_helper.from_array(np.ones((5, 3), np.float32), "wm")
    run_model(save_model("matmul_mismatch.onnx", [helper.make_node("MatMul", ["x", "wm"], ["y"], name="mm")], [vi("x", ["n", 4])], [vi("y", None)], [wm]),
              ["mm"])
    run_model(save_model("concat_axis_out_of_range.onnx", [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=5)],
                         [vi("x", ["n", 4])], [vi("y", None)]), ["cat"])
    run_model(save_model("transpose_bad_perm.onnx", [helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 0])],
                         [vi("x", ["n", 4])], [vi("y", None)]), ["tr"])
    split = numpy_helper.from_array(np.array([1, 1], np.int64), "split")
    run_model(save_model("split_sizes_wrong.onnx", [helper.make_node("Split", ["x", "split"], ["y", "z"], name="sp", axis=1)],
                         [vi("x", ["n", 4])], [vi("y", None), vi("z", None)], [split]), ["sp"])
    starts, ends, axes, steps = (numpy_helper.from_array(np.array(v, np.int64), n) for v, n in
                                 (([0], "starts"), ([2], "ends"), ([1], "axes"), ([0], "steps")))
    run_model(save_model("slice_step_zero.onnx", [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"], name="sl")],
                         [vi("x", ["n", 4])], [vi("y", None)], [starts, ends, axes, steps]), ["sl"])
    huge_shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20, 1, 4], np.int64), "huge_shape")
    run_model(save_model("constant_of_shape_2_42.onnx", [helper.make_node("ConstantOfShape", ["huge_shape"], ["c"], name="cos"),
                                                         helper.make_node("Add", ["x", "c"], ["y"], name="add_c")],
                         [vi("x", ["n", 4])], [vi("y", None)], [huge_shape]), ["too large"])
    big_attr = helper.make_node("Constant", [], ["c"], name="big_const", value=raw_tensor("v", TensorProto.FLOAT, [1 << 40]))
    run_model(save_model("huge_constant_attribute.onnx", [big_attr, helper.make_node("Add", ["x", "c"], ["y"], name="add_c")],
                         [vi("x", ["n", 4])], [vi("y", None)]), ["big_const"])
    ext = raw_tensor("w", TensorProto.FLOAT, [4])
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", "16")):
        e = ext.external_data.add()
        e.key, e.value = k, v
    (CORPUS / "weights.bin").write_bytes(b"\x00" * 8)  # 8 of the 16 bytes
    run_model(save_model("external_data_truncated.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [ext]), ["'w'", "weights.bin"])
    ext2 = onnx.TensorProto()
    ext2.CopyFrom(ext)
    ext2.external_data[0].value = "../../etc/passwd"
    run_model(save_model("external_data_escapes_folder.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [ext2]), ["'w'", "relative path"])
    ext3 = onnx.TensorProto()
    ext3.CopyFrom(ext)
    ext3.external_data[1].value = "99999999999"
    run_model(save_model("external_data_offset_past_end.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [ext3]), ["'w'", "offset"])
    ext4 = onnx.TensorProto()
    ext4.CopyFrom(ext)
    ext4.external_data[1].value = "-3"
    run_model(save_model("external_data_negative_offset.onnx", [add], [vi("x", ["n", 4])], [vi("y", ["n", 4])], [ext4]), ["'w'", "offset"])

    (CORPUS / "not_protobuf.onnx").write_bytes(b"this is not an ONNX model at all\n" * 3)
    run_model("not_protobuf.onnx", ["not_protobuf.onnx"])
    (CORPUS / "empty.onnx").write_bytes(b"")
    run_model("empty.onnx", ["empty.onnx"])
    ok = (CORPUS / "ok_add.onnx").read_bytes()
    (CORPUS / "truncated.onnx").write_bytes(ok[: len(ok) // 2])
    run_model("truncated.onnx", ["truncated.onnx"])
    nograph = helper.make_model(helper.make_graph([], "g", [], []))
    nograph.ClearField("graph")
    (CORPUS / "no_graph.onnx").write_bytes(nograph.SerializeToString())
    run_model("no_graph.onnx", ["no_graph.onnx"])


def npy_header(descr, shape, fortran=False, version=1, pad_to=64):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, "True" if fortran else "False", shape)
    prefix = 10 if version == 1 else 12
    total = prefix + len(d) + 1
    d += " " * ((pad_to - total % pad_to) % pad_to) + "\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(d)) + d.encode()


def npys():
    np.save(CORPUS / "ok_x.npy", np.ones((3, 4), np.float32))
    data = np.ones(12, np.float32).tobytes()

    def npy(name, body, expect, names_file=True):
        (CORPUS / name).write_bytes(body)
        case(name, name, "engine-run", ["{ok_model}", "--input", "x={corpus}/" + name, "--output-dir", "{out}"], ([name] if names_file else []) + expect)

    npy("bad_magic.npy", b"\x93NUMPZ\x01\x00" + npy_header("<f4", "(3, 4)")[8:] + data, ["magic"])
    npy("header_longer_than_file.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 60000) + b"{'descr'", ["header"])
    npy("shape_2_40_no_data.npy", npy_header("<f4", "(1099511627776,)"), ["too large"])
    npy("shape_2_30_no_data.npy", npy_header("<f4", "(1073741824,)"), ["truncated"])
    npy("shape_overflows_int64.npy", npy_header("<f4", "(4611686018427387904, 4611686018427387904)"), [])
    npy("shape_20_digit_dim.npy", npy_header("<f4", "(99999999999999999999999,)"), ["64 bits"])
    npy("shape_negative.npy", npy_header("<f4", "(-3, 4)") + data, ["shape"])
    npy("big_endian.npy", npy_header(">f4", "(3, 4)") + data, [">f4"])
    npy("fortran_order.npy", npy_header("<f4", "(3, 4)", fortran=True) + data, ["Fortran"])
    npy("truncated_data.npy", npy_header("<f4", "(3, 4)") + data[:20], ["truncated"])
    npy("rank_9.npy", npy_header("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)") + data[:4], ["rank"])
    npy("object_dtype.npy", npy_header("|O", "(3, 4)") + data, ["|O"])
    npy("no_shape_key.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 48) + b"{'descr': '<f4', 'fortran_order': False}".ljust(47) + b"\n" + data,
        ["shape"])
    # The header that crashed engine-run: a long run of nested parentheses and quotes sent the
    # regex-based parser into deep recursion.
    nested = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "(" * 30000 + "3, 4)}"
    npy("deeply_nested_header.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", len(nested) + 1) + nested.encode() + b"\n" + data, ["header"])
    long_descr = "{'descr': '" + "x" * 60000 + "', 'fortran_order': False, 'shape': (3, 4), }"
    npy("overlong_descr.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(long_descr) + 1) + long_descr.encode() + b"\n" + data, ["header"])
    npy("version_9.npy", b"\x93NUMPY\x09\x00" + npy_header("<f4", "(3, 4)")[8:] + data, ["version"])
    npy("int64_for_float_input.npy", npy_header("<i8", "(3, 4)") + np.ones(12, np.int64).tobytes(), ["'x'", "float32", "int64"], names_file=False)
    npy("wrong_inner_dim.npy", npy_header("<f4", "(3, 5)") + np.ones(15, np.float32).tobytes(), ["'x'", "dim 1"], names_file=False)
    npy("empty.npy", b"", ["magic"])

    def pb(name, body, expect):
        (CORPUS / name).write_bytes(body)
        case(name, name, "engine-run", ["{ok_model}", "--input", "x={corpus}/" + name, "--output-dir", "{out}"], [name] + expect)

    t = numpy_helper.from_array(np.ones((3, 4), np.float32), "x")
    t.raw_data = t.raw_data[:7]
    pb("pb_raw_data_short.pb", t.SerializeToString(), ["raw_data"])
    pb("pb_not_a_tensor.pb", b"\xff\xff\xff\xff garbage", ["TensorProto"])
    t2 = numpy_helper.from_array(np.ones((3, 4), np.float32), "x")
    del t2.dims[:]
    t2.dims.extend([1 << 40, 1 << 40])
    pb("pb_dims_2_80.pb", t2.SerializeToString(), ["too large"])


def configs():
    def yaml(name, text, expect, extra=(), names_file=True):
        (CORPUS / name).write_text(text)
        case(name, name, "engine-build", ["{corpus}/" + name, "--no-bench", *extra], ([name] if names_file else []) + expect)

    base = "model: ok_add.onnx\noutput: out/add.engine\nprofiles:\n  p:\n    dims: {n: {min: 1, opt: 3, max: 4}}\n"
    yaml("threads_not_int.yaml", base + "threads: many\n", ["threads"])
    yaml("unknown_key.yaml", base + "tactix: {select: true}\n", ["tactix"])
    yaml("alias_cycle.yaml", "model: &m ok_add.onnx\nprofiles: &p\n  p: *p\n", ["profiles"])
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)) + base + "inputs: {x: *j}\n"
    yaml("billion_laughs.yaml", laughs, [])
    yaml("min_above_max.yaml", base.replace("{min: 1, opt: 3, max: 4}", "{min: 5, opt: 3, max: 4}"), ["min"])
    yaml("negative_dim.yaml", base.replace("{min: 1, opt: 3, max: 4}", "-7"), ["-7"])
    yaml("dim_2_40.yaml", base.replace("{min: 1, opt: 3, max: 4}", "1099511627776"), ["'x'", "too large"], names_file=False)
    yaml("missing_model.yaml", "output: out/add.engine\nprofiles:\n  p:\n    dims: {n: 3}\n", ["model"])
    yaml("model_not_found.yaml", base.replace("ok_add.onnx", "nowhere.onnx"), ["nowhere.onnx"])
    yaml("precision_fp8.yaml", base + "precision: fp8\n", ["fp8"])
    yaml("rate_negative.yaml", base + "benchmark: {rate_hz: -10}\n", ["rate_hz"])
    yaml("tab_indentation.yaml", "model: ok_add.onnx\nprofiles:\n\tp:\n\t\tdims: {n: 3}\n", [])
    yaml("not_a_mapping.yaml", "- just\n- a\n- list\n", [])
    yaml("duplicate_key.yaml", base + "threads: 1\nthreads: 2\n", ["threads"])
    yaml("output_is_a_directory.yaml", base.replace("out/add.engine", "."), ["."])
    yaml("output_overwrites_model.yaml", base.replace("out/add.engine", "ok_add.onnx"), ["ok_add.onnx"])
    yaml("streaming_unknown_output.yaml", base + "streaming: {cold_start: p, step: p, state: [{output: kv, input: x, axis: 0}], "
         "window: {tokens_per_step: 1, max_steps: 2}}\n", ["kv"])
    yaml("plugin_library_missing.yaml", base + "plugins: {load: [libnothere.so]}\n", ["libnothere.so"])
    yaml("memory_cap_too_small.yaml", base, ["memory cap", "bytes"], extra=("--max-memory", "200"), names_file=False)
    yaml("empty.yaml", "", [])


def engines():
    # A plausible header and nothing else; the loader must reject, not read past the end.
    (CORPUS / "header_only.engine").write_bytes(b"KILNENG\x00" + b"\x01" * 120)
    case("header_only.engine", "header_only.engine", "engine-run",
         ["{corpus}/header_only.engine", "--input", "x={ok_x}", "--output-dir", "{out}"], ["header_only.engine"])
    (CORPUS / "tiny.engine").write_bytes(b"KILN")
    case("tiny.engine", "tiny.engine", "engine-run", ["{corpus}/tiny.engine", "--inspect"], ["tiny.engine"])


def main():
    CORPUS.mkdir(exist_ok=True)
    for f in CORPUS.iterdir():
        f.unlink()
    models()
    npys()
    configs()
    engines()
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"{len(cases)} cases, {len(list(CORPUS.iterdir()))} files in {CORPUS}")


if __name__ == "__main__":
    main()
