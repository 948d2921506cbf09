"""kiln: load and run kiln engines from Python (docs/python.md).

    import kiln, numpy as np
    engine = kiln.Engine("model.engine")
    ctx = engine.create_context("incremental")
    outputs = ctx.run({"x": np.zeros((1, 274, 384), np.float32)})   # {name: ndarray}

Errors raise kiln.Error with kiln's one-line message (e.code names the kind).
"""
import atexit as _atexit
import json as _json
import os as _os

# oneDNN runs on libgomp, which reads its wait policy once, when it is loaded. Its default lets idle
# threads spin for ~300k iterations after every region: on a machine shared with other work the
# spinning thread takes the core its partner needs. The command-line tools wait passively after a
# short spin (tools/omp_wait_policy.h, docs/execution.md); so does the Python package, unless the
# user chose a policy or libgomp was loaded before kiln (by torch, say), when this changes nothing.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    _os.environ["GOMP_SPINCOUNT"] = "10000"

from ._kiln import (  # noqa: F401
    Context,
    Engine,
    Error,
    InferQueue,
    Session,
    StreamingSession,
    __version__,
    set_log_level,
    set_logger,
)
from . import _kiln

__all__ = ["Engine", "Context", "Session", "StreamingSession", "InferQueue", "Error", "build", "set_log_level", "set_logger", "__version__"]


def build(config_path, overrides=None, output=None, report=None, benchmark=True):
    """Builds an engine as `engine-build CONFIG` does and returns its report as a dict.

    overrides: {dotted.key: value} like engine-build's --set KEY=VALUE (values that are not str are
    written as JSON, which YAML reads). The report dict gains "engine_path" and "report_path"."""
    pairs = []
    for key, value in (overrides or {}).items():
        pairs.append((str(key), value if isinstance(value, str) else _json.dumps(value)))
    engine_path, report_path, text = _kiln._build(str(config_path), pairs, str(output or ""), str(report or ""), bool(benchmark))
    result = _json.loads(text)
    result["engine_path"] = engine_path
    result["report_path"] = report_path
    return result


# A Python log callback must not be called once the interpreter is going away.
_atexit.register(set_logger, None)
