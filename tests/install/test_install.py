#!/usr/bin/python3
"""kiln as an installed library, used from outside its tree only.

  test_install.py --source-dir SRC --build-dir BUILD --workdir DIR

1. `cmake --install BUILD --prefix DIR/prefix`; the layout: public headers only (no protobuf, no
   runtime/ or builder/ includes), libkiln_runtime.so with its SONAME and only the API exported,
   the static library, libkiln_builder.so, kilnConfig*.cmake, kiln.pc, the tools, the Python package.
2. The installed engine-build builds the small ControlTransformer; the installed engine-run runs its
   incremental profile on generated inputs (--save-inputs) for reference outputs.
3. examples/embed (C++, find_package(kiln), kiln::runtime, and again kiln::runtime_static) and
   examples/c (C11, pkg-config) are built out of tree against the prefix and run on the same inputs:
   their outputs must equal engine-run's.
4. The Python package from the prefix: tests/python/test_python_package.py (full, incremental and
   the streaming loop against engine-run within 1e-6).
5. A runtime-only configure (-DKILN_BUILD_BUILDER=OFF) needs neither ONNX, yaml-cpp nor gtest.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

import numpy as np

results = {"passed": 0, "failed": 0}


def check(label, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(("PASS " if ok else "FAIL ") + label + ("" if ok or not detail else ": " + str(detail)[-3000:]))
    return ok


def run(cmd, env=None, cwd=None, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


def same_outputs(label, got_dir, ref_dir):
    ref = {f: np.load(os.path.join(ref_dir, f)) for f in os.listdir(ref_dir) if f.endswith(".npy")}
    problems = []
    for f, want in ref.items():
        path = os.path.join(got_dir, f)
        if not os.path.exists(path):
            problems.append(f"{f} missing")
            continue
        got = np.load(path)
        if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
            problems.append(f"{f}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}, max err "
                            f"{np.abs(got.astype(np.float64) - want.astype(np.float64)).max() if got.shape == want.shape else 'n/a'}")
    return check(f"{label}: {len(ref)} outputs equal engine-run's", ref and not problems, problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    src, work = os.path.abspath(a.source_dir), os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prefix = os.path.join(work, "prefix")

    # 1. Install and the layout.
    r = run(["cmake", "--install", a.build_dir, "--prefix", prefix])
    if not check("cmake --install into a temporary prefix", r.returncode == 0, r.stderr):
        return finish()
    libdir = next(d for d in (os.path.join(prefix, "lib"), *glob.glob(os.path.join(prefix, "lib", "*-linux-gnu"))) if
                  os.path.exists(os.path.join(d, "libkiln_runtime.so")))
    headers = sorted(os.path.basename(p) for p in glob.glob(os.path.join(prefix, "include", "kiln", "*")))
    want = ["builder.h", "engine.h", "execution_context.h", "infer_queue.h", "kiln.h", "kiln.hpp", "logging.h", "plugin_api.h",
            "session.h", "status.h", "streaming_session.h", "tensor.h", "dtype.h", "version.h"]
    check("public headers installed", all(h in headers for h in want), headers)
    leaks = []
    for path in glob.glob(os.path.join(prefix, "include", "**", "*"), recursive=True):
        if os.path.isdir(path):
            continue
        text = open(path, errors="replace").read()
        if path.endswith(".pb.h") or "google/protobuf" in text or '#include "runtime/' in text or '#include "builder/' in text or \
                '#include "plugins/' in text or "#include <spdlog" in text or "#include <fmt" in text:
            leaks.append(os.path.relpath(path, prefix))
    check("no protobuf, spdlog or private header reaches the installed headers", not leaks and set(headers) <= set(
        want + ["attributes.h", "cpu_features.h", "engine_info.h", "entry_spec.h", "export.h", "shape.h", "streaming_spec.h"]), leaks or headers)
    so = os.path.join(libdir, "libkiln_runtime.so")
    d = run(["readelf", "-d", so]).stdout
    check("libkiln_runtime.so has a SONAME with the version", "Library soname: [libkiln_runtime.so.0.1]" in d and
          os.path.exists(os.path.join(libdir, "libkiln_runtime.so.0.1.0")), d)
    needed = [line.split("[")[1].rstrip("]") for line in d.splitlines() if "(NEEDED)" in line]
    check("the runtime needs oneDNN, OpenMP and protobuf, not spdlog, fmt, yaml-cpp or ONNX",
          any("dnnl" in n for n in needed) and any(n.startswith(("libgomp", "libomp")) for n in needed) and
          not any(x in n for n in needed for x in ("spdlog", "fmt", "yaml", "onnx")), needed)
    exported = run(["nm", "-D", "--defined-only", "-C", so]).stdout.splitlines()
    private = [s for s in exported if any(x in s for x in ("kiln::ExecutionContext::", "kiln::Engine::", "kiln::Plan", "kiln::KernelRegistry",
                                                           "kiln::PluginRegistry", "google::protobuf", "kiln::engine::", "spdlog::",
                                                           "fmt::", "dnnl::"))]
    public = ["kiln_engine_load", "kiln_context_run", "kiln::api::Engine::load_file", "kiln::api::ExecutionContext::run",
              "kiln::api::StreamingSession::step", "kiln::api::Session::run", "kiln::api::Session::write_state", "kiln::InferQueue::submit", "kiln::set_logger", "kiln::Tensor::zeros"]
    check(f"only the API is exported ({len(exported)} symbols)", not private and all(any(p in s for s in exported) for p in public),
          private[:10] or [p for p in public if not any(p in s for s in exported)])
    for f in ("libkiln_runtime.a", "libkiln_builder.so", "cmake/kiln/kilnConfig.cmake", "cmake/kiln/kilnConfigVersion.cmake",
              "cmake/kiln/kilnTargets.cmake", "pkgconfig/kiln.pc"):
        check(f"installed lib/{f}", os.path.exists(os.path.join(libdir, f)))
    tools = {t: os.path.join(prefix, "bin", t) for t in ("engine-build", "engine-run")}
    check("installed the tools", all(os.access(p, os.X_OK) for p in tools.values()))
    pydirs = glob.glob(os.path.join(prefix, "lib", "python3*", "dist-packages"))
    check("installed the Python package", len(pydirs) == 1 and os.path.exists(os.path.join(pydirs[0], "kiln", "__init__.py")), pydirs)

    # 2. An engine from the installed tools, and engine-run's outputs for reference.
    sys.path.insert(0, os.path.join(src, "models"))
    import export_models  # noqa: E402
    onnx_path = os.path.join(work, "ct.small.onnx")
    export_models.export("control_transformer", "small", onnx_path)
    engine = os.path.join(work, "ct.engine")
    r = run([tools["engine-build"], os.path.join(src, "tests", "e2e", "configs", "control_transformer_small.yaml"), "--set",
             f"model={onnx_path}", "--set", "streaming.steps=2", "--output", engine, "--no-bench"])
    if not check("installed engine-build builds the small ControlTransformer", r.returncode == 0, r.stderr):
        return finish()
    inputs, ref = os.path.join(work, "in"), os.path.join(work, "ref")
    r = run([tools["engine-run"], engine, "--profile", "incremental", "--save-inputs", inputs, "--output-dir", ref])
    if not check("installed engine-run runs the incremental profile on generated inputs", r.returncode == 0, r.stderr):
        return finish()

    # 3. examples/embed with find_package(kiln), shared and static; examples/c with pkg-config.
    # An ASan build's static library (built with clang, scripts/build.sh) is linked as its build
    # links: by clang, with the sanitizers' shared runtime the test runs under and clang's OpenMP.
    asan = any("libclang_rt.asan" in p for p in os.environ.get("LD_PRELOAD", "").split(":"))
    static_extra = ["-DKILN_EMBED_STATIC=ON"] + (
        ["-DCMAKE_CXX_COMPILER=clang++", "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined -shared-libsan"] if asan else [])
    for variant, extra in (("shared", []), ("static", static_extra)):
        bdir = os.path.join(work, f"embed-{variant}")
        r = run(["cmake", "-S", os.path.join(src, "examples", "embed"), "-B", bdir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={prefix}"] + extra)
        if r.returncode == 0:
            r = run(["cmake", "--build", bdir])
        if not check(f"examples/embed ({variant}) configures and builds against the prefix", r.returncode == 0, r.stdout + r.stderr):
            continue
        out = os.path.join(work, f"out-embed-{variant}")
        r = run([os.path.join(bdir, "embed"), engine, "incremental", inputs, out, "--queue", "6"])
        if check(f"examples/embed ({variant}) runs", r.returncode == 0 and "every result equal to the direct run" in r.stdout, r.stdout + r.stderr):
            same_outputs(f"examples/embed ({variant})", out, ref)
        if variant == "shared":
            ldd = run(["ldd", os.path.join(bdir, "embed")]).stdout
            check("examples/embed loads libkiln_runtime.so from the prefix", os.path.join(libdir, "libkiln_runtime.so.0.1") in ldd, ldd)
    pc_env = {"PKG_CONFIG_PATH": os.path.join(libdir, "pkgconfig")}
    flags = run(["pkg-config", "--cflags", "--libs", "kiln"], env=pc_env)
    check("pkg-config --cflags --libs kiln", flags.returncode == 0 and "-lkiln_runtime" in flags.stdout, flags.stderr)
    exe = os.path.join(work, "run_engine_c")
    r = run(["cc", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", os.path.join(src, "examples", "c", "run_engine.c"), "-o", exe] +
            flags.stdout.split())
    if check("examples/c compiles as C11 with pkg-config's flags", r.returncode == 0, r.stderr):
        out = os.path.join(work, "out-c")
        os.makedirs(out)
        r = run([exe, engine, "incremental", inputs, out], env={"LD_LIBRARY_PATH": libdir})
        if check("examples/c runs", r.returncode == 0, r.stdout + r.stderr):
            same_outputs("examples/c", out, ref)

    # kiln::Session from the installed headers: seed 003's two entries over one state buffer.
    import stateful_cache  # noqa: E402
    sdir = os.path.join(work, "stateful")
    stateful_cache.export(sdir, max_batch=4, max_seq=6)
    with open(os.path.join(sdir, "stateful.yaml"), "w") as f:
        dims = "{batch: {min: 1, opt: 2, max: 4}, seq: {min: 1, opt: 3, max: 6}}"
        f.write("output: stateful.engine\nentries:\n"
                f"  set_cache: {{model: set_cache.onnx, profiles: {{default: {{dims: {dims}}}}}}}\n"
                f"  get_cache: {{model: get_cache.onnx, profiles: {{default: {{dims: {dims}}}}}}}\n"
                "state:\n  cache:\n    - {entry: set_cache, input: cache, output: cache_out}\n    - {entry: get_cache, input: cache}\n")
    r = run([tools["engine-build"], os.path.join(sdir, "stateful.yaml"), "--no-bench"])
    exe = os.path.join(work, "session_check")
    if check("installed engine-build builds seed 003's two-entry engine", r.returncode == 0, r.stderr):
        r = run(["c++", "-std=c++20", "-Wall", "-Wextra", "-Werror", os.path.join(src, "tests", "install", "session_check.cpp"), "-o", exe] +
                flags.stdout.split())
        if check("tests/install/session_check.cpp compiles against the installed kiln/session.h", r.returncode == 0, r.stderr):
            r = run([exe, os.path.join(sdir, "stateful.engine")], env={"LD_LIBRARY_PATH": libdir})
            check("kiln::Session from the prefix: run, read_state, write_state, reset", r.returncode == 0 and "session ok" in r.stdout,
                  r.stdout + r.stderr)

    # 4. Python from the prefix.
    if pydirs:
        r = run([sys.executable, os.path.join(src, "tests", "python", "test_python_package.py"), "--engine-build", tools["engine-build"],
                 "--engine-run", tools["engine-run"], "--workdir", os.path.join(work, "python"), "--expect-prefix", prefix],
                env={"PYTHONPATH": pydirs[0]}, timeout=1200)
        print("\n".join("    " + line for line in r.stdout.strip().splitlines()))
        check("the Python package from the prefix passes tests/python/test_python_package.py", r.returncode == 0, r.stderr)

    # 5. A runtime-only configure.
    bdir = os.path.join(work, "runtime-only")
    r = run(["cmake", "-S", src, "-B", bdir, "-G", "Ninja", "-DKILN_BUILD_BUILDER=OFF", "-DKILN_BUILD_TESTS=OFF"])
    ok = r.returncode == 0
    if ok:
        targets = run(["ninja", "-C", bdir, "-t", "targets", "all"]).stdout
        cache = open(os.path.join(bdir, "CMakeCache.txt")).read()
        ok = "libkiln_runtime.so" in targets and "engine-build" not in targets and "kiln_tests" not in targets and \
            "yaml-cpp_DIR:PATH=/" not in cache and "ONNX_DIR:PATH=/" not in cache and "GTest_DIR:PATH=/" not in cache
    check("-DKILN_BUILD_BUILDER=OFF -DKILN_BUILD_TESTS=OFF configures the runtime alone", ok, r.stdout[-1500:] + r.stderr)
    return finish()


def finish():
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
