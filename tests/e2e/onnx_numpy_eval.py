"""A small, independent numpy interpreter for the ONNX ops the models/ exports use (opset 13-17).

There is no onnxruntime on this machine. This interpreter lets the end-to-end test check, without kiln,
that an exported graph really computes PyTorch's outputs at shapes other than the trace shapes (a
dynamic axis that the tracer silently baked in shows up here as a wrong shape or value). It is
deliberately plain: float32 throughout, no optimisation, only the ops and attributes the exports use;
anything else raises NotImplementedError naming the op or attribute.
"""
import numpy as np
import onnx
from onnx import numpy_helper

_ONNX_TO_NP = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_, onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.INT8: np.int8, onnx.TensorProto.FLOAT16: np.float16,
}


def _erf(x):
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution of erf's range).
    a1, a2, a3, a4, a5, p = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911
    s = np.sign(x)
    ax = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + p * ax)
    y = 1.0 - (((((a5 * t + a4) * t) + a3) * t + a2) * t + a1) * t * np.exp(-ax * ax)
    return (s * y).astype(x.dtype)


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads_2d(attrs, kernel, in_hw, strides, dilations):
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if auto_pad not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError(f"auto_pad={auto_pad!r}")
    return list(attrs.get("pads", [0, 0, 0, 0]))


def _windows(x, kernel, strides, dilations):
    """[N, C, H, W] -> [N, C, OH, OW, KH, KW] strided view."""
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw), writeable=False)


def _conv(x, w, b, attrs):
    if x.ndim != 4:
        raise NotImplementedError("Conv: only 2-D convolutions")
    kernel = list(attrs.get("kernel_shape", w.shape[2:]))
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    group = attrs.get("group", 1)
    pads = _pads_2d(attrs, kernel, x.shape[2:], strides, dilations)
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = _windows(np.ascontiguousarray(x), kernel, strides, dilations)  # N C OH OW KH KW
    cin_g = x.shape[1] // group
    cout_g = w.shape[0] // group
    outs = []
    for g in range(group):
        wg = w[g * cout_g:(g + 1) * cout_g]  # [Cout_g, Cin_g, KH, KW]
        xg = win[:, g * cin_g:(g + 1) * cin_g]
        outs.append(np.einsum("ncijhw,ochw->noij", xg, wg, optimize=True))
    y = np.concatenate(outs, axis=1)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y.astype(np.float32)


def _maxpool(x, attrs):
    if attrs.get("ceil_mode", 0) or attrs.get("storage_order", 0):
        raise NotImplementedError("MaxPool: ceil_mode/storage_order")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    pads = _pads_2d(attrs, kernel, x.shape[2:], strides, dilations)
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=-np.inf)
    return _windows(np.ascontiguousarray(x), kernel, strides, dilations).max(axis=(4, 5))


def _slice(data, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        # Python slicing clamps out-of-range bounds the same way ONNX Slice does.
        idx[int(a)] = slice(int(s), int(e), int(st))
    return data[tuple(idx)]


def _reshape(x, shape, allowzero):
    shape = [int(d) for d in shape]
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return (np.trunc(a / b)).astype(a.dtype)
    return (a / b).astype(a.dtype)


def _layernorm(x, scale, bias, attrs):
    axis = attrs.get("axis", -1)
    eps = attrs.get("epsilon", 1e-5)
    axes = tuple(range(axis % x.ndim, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (xd - mean) / np.sqrt(var + eps) * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def _gemm(a, b, c, attrs):
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    y = attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        y = y + attrs.get("beta", 1.0) * c
    return y.astype(np.float32)


def _split(x, split, attrs, n_out):
    axis = attrs.get("axis", 0)
    if split is None:
        split = [x.shape[axis] // n_out] * n_out
    return np.split(x, np.cumsum(split)[:-1], axis=axis)


def _run_node(op, ins, attrs, n_out):
    x = ins[0] if ins else None
    opt = lambda i: ins[i] if len(ins) > i else None  # noqa: E731
    if op == "Constant":
        if "value" in attrs:
            return [numpy_helper.to_array(attrs["value"])]
        raise NotImplementedError(f"Constant attributes {list(attrs)}")
    if op == "Identity":
        return [x]
    if op == "Shape":
        return [np.array(x.shape[attrs.get("start", 0):attrs.get("end", None)], np.int64)]
    if op == "Gather":
        return [np.take(x, ins[1], axis=attrs.get("axis", 0))]
    if op == "Unsqueeze":
        axes = sorted(int(a) % (x.ndim + len(ins[1])) for a in ins[1])
        for a in axes:
            x = np.expand_dims(x, a)
        return [x]
    if op == "Squeeze":
        axes = opt(1)
        return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(int(a) for a in axes))]
    if op == "Concat":
        return [np.concatenate(ins, axis=attrs["axis"])]
    if op == "Reshape":
        return [_reshape(x, ins[1], attrs.get("allowzero", 0))]
    if op == "Slice":
        return [_slice(x, ins[1], ins[2], opt(3), opt(4))]
    if op == "Cast":
        return [x.astype(_ONNX_TO_NP[attrs["to"]])]
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
        return [np.full([int(d) for d in x], v.reshape(-1)[0], v.dtype)]
    if op == "Range":
        return [np.arange(x, ins[1], ins[2]).astype(x.dtype)]
    if op == "Expand":
        return [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(d) for d in ins[1]))).copy()]
    if op == "Where":
        return [np.where(x, ins[1], ins[2])]
    if op == "Equal":
        return [np.equal(x, ins[1])]
    if op == "Not":
        return [np.logical_not(x)]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power}
    if op in binary:
        return [binary[op](x, ins[1]).astype(x.dtype)]
    if op == "Div":
        return [_div(x, ins[1])]
    unary = {"Erf": _erf, "Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0).astype(v.dtype),
             "Sqrt": np.sqrt, "Exp": np.exp, "Neg": np.negative,
             "Sigmoid": lambda v: (1 / (1 + np.exp(-v))).astype(v.dtype)}
    if op in unary:
        return [unary[op](x)]
    if op == "MatMul":
        return [np.matmul(x, ins[1])]
    if op == "Gemm":
        return [_gemm(x, ins[1], opt(2), attrs)]
    if op == "Softmax":
        return [_softmax(x, attrs.get("axis", -1))]
    if op == "LayerNormalization":
        if n_out > 1:
            raise NotImplementedError("LayerNormalization with Mean/InvStdDev outputs")
        return [_layernorm(x, ins[1], opt(2), attrs)]
    if op == "Transpose":
        return [np.transpose(x, attrs.get("perm"))]
    if op == "Split":
        return _split(x, opt(1), attrs, n_out)
    if op == "Flatten":
        axis = attrs.get("axis", 1) % max(x.ndim, 1)
        return [x.reshape(int(np.prod(x.shape[:axis])), -1)]
    if op == "GlobalAveragePool":
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)]
    if op == "Conv":
        return [_conv(x, ins[1], opt(2), attrs)]
    if op == "MaxPool":
        return [_maxpool(x, attrs)]
    if op == "ReduceMean":
        axes = attrs.get("axes")
        return [x.mean(axis=None if axes is None else tuple(axes), keepdims=bool(attrs.get("keepdims", 1)))]
    raise NotImplementedError(f"op {op}")


def run_model(model_path, inputs):
    """Evaluate the graph on a dict of numpy inputs; returns {output name: array}."""
    m = onnx.load(model_path)
    env = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for v in m.graph.input:
        if v.name in inputs:
            env[v.name] = inputs[v.name]
        elif v.name not in env:
            raise KeyError(f"missing input {v.name}")
    for node in m.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise NotImplementedError(f"domain {node.domain}")
        ins = [env[n] if n else None for n in node.input]
        while ins and ins[-1] is None:
            ins.pop()
        try:
            outs = _run_node(node.op_type, ins, _attrs(node), len(node.output))
        except NotImplementedError:
            raise
        except Exception as e:
            raise RuntimeError(f"node {node.name} ({node.op_type}): {e}") from e
        for name, val in zip(node.output, outs):
            if name:
                env[name] = np.asarray(val)
    return {v.name: env[v.name] for v in m.graph.output}
