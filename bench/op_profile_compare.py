#!/usr/bin/python3
"""Per-step comparison of kiln and ONNX Runtime on whole models (issue 19: "no single elementwise or
normalisation step is slower than ONNX Runtime's same op in its own profile").

  /usr/bin/python3 bench/op_profile_compare.py [--rounds R] [--iterations N] [--threads T] [--only NAME ...]
      [--zoo | --zoo-only] [--export] [--fusion-off] [--results FILE] [--markdown FILE] [--engine-run PATH]

--fusion-off builds kiln with attention fusion off (`fusions: {attention: off}`), so the attention's own
steps (batched MatMul, Softmax, the mask, Transpose) are compared one by one.

Workloads, model exports and input cases are the peer benchmark's (bench/run_peer_bench.py; --zoo adds, and
--zoo-only runs only, the torchvision zoo at batch 1). For each workload, R rounds alternate the two engines:

- ONNX Runtime: bench/ort_bench.js --profile (ORT's enableProfiling), 1 warm-up + N profiled runs. The
  per-node times are the `<node>_kernel_time` events (cat "Node", args.op_name, dur in us); the warm-up run's
  events are dropped (events are assigned to runs by the "model_run" events around them).
- kiln: build/engine-run MODEL -i NAME=FILE ... --iterations N --profile-layers TRACE.json --profile-runs N:
  after N timed runs, N runs with per-step timing. Each "X" event is a plan step: name, args.op_type,
  args.run_us (each profiled run's time, in us), and args.replaced (the ONNX nodes a fused step replaced)
  when the trace carries it.

Quoted times are medians: per ORT node and per kiln step over all its profiled runs of all rounds.

Matching. Both engines name their steps after ONNX nodes. A kiln step is anchored at the ONNX node of its
name; ORT's node names are resolved to ONNX nodes by: the exact node name; `<tensor>_nchwc` (ORT's NCHWc
layout transformer names a node after its output tensor: the node producing that tensor); `<node>/<X>Fusion/`
(ORT's fusions, e.g. QuickGeluFusion); a trailing `_token_<n>` is dropped first. A step whose op type equals
its anchor's ONNX op type stands for that node alone. A fused step (op type differs) stands for its anchor
plus the nodes it replaced: kiln's args.replaced when present. Otherwise (ORT never lists them, kiln's
trace of this commit does not either) each ONNX node no step is anchored at is given, repeatedly until
nothing changes, to a neighbouring step that may absorb nodes (kiln: a step whose op type differs from its
anchor's; ORT: the same, and any Conv / MatMul / Gemm node, since ORT keeps "Conv" for a convolution
with a fused sum and activation): the
latest-running step producing one of its inputs (epilogue fusion), else the earliest-running step consuming
its outputs (ORT's fusions named after their last node, e.g. QuickGelu after the Mul; a Conv / MatMul node
tries its consumers first). A node with no such
neighbour (eliminated, constant-folded) stays unattributed and is listed by op type. Steps of one engine and
steps of the other that share an ONNX node form one comparison unit: the sum of kiln's steps against
the sum of ORT's; a unit whose cover needed the inference above is marked "inferred". Steps with no ONNX anchor (ORT's ReorderInput /
ReorderOutput, kiln's own layout steps) are listed per engine with their totals.

Classification. A unit is "compute" when any of its steps' op types or any ONNX node it covers is a
Conv / ConvTranspose / MatMul / Gemm / attention / recurrent op (op type containing Conv, MatMul, Gemm,
Attention, Einsum, LSTM, GRU or RNN: so also kiln's FusedConv / FusedMatMul, ORT's FusedConv / FusedGemm /
FusedMatMul): those are left out. Every other unit (elementwise, normalisation, reduction, pooling, data movement) is checked: the
report lists each one whose kiln time exceeds ORT's, with both times and the ratio, and the totals per kiln
op type.

Output: --markdown (default bench/RESULTS-op-profile.md, rewritten) and --results (default
bench/results-op-profile.json: every unit, every sample). Records machine, load average at start and end,
versions and commits like run_peer_bench.py. A missing export (models are exported only with --export, as
run_peer_bench.py does) or an engine failing on a model is reported in the table and the run goes on.
This is a benchmark, not a test: it is not part of ctest.
"""
import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

import onnx

import run_peer_bench as peer

BENCH, ROOT, OUT = peer.BENCH, peer.ROOT, peer.OUT
COMPUTE = re.compile(r"Conv|MatMul|Gemm|Attention|Einsum|LSTM|GRU|RNN", re.I)
TOKEN = re.compile(r"_token_\d+$")
FUSION = re.compile(r"^(.*)/[A-Za-z0-9]*Fusion/?$")


def median(xs):
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------- profiles

def ort_profile(prefix, warmup):
    """{node name: (op_name, [us per profiled run])} from ORT's trace; the first WARMUP runs are dropped."""
    files = sorted(glob.glob(prefix + "*.json"))
    if not files:
        raise RuntimeError("ORT wrote no profile")
    with open(files[-1]) as f:
        events = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    nodes = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        r = next((i for i, (a, b) in enumerate(runs) if a <= e["ts"] <= b), None)
        if r is None or r < warmup:
            continue
        name = e["name"][:-len("_kernel_time")]
        op, per_run = nodes.setdefault(name, (e["args"].get("op_name", "?"), {}))
        per_run[r] = per_run.get(r, 0.0) + e["dur"]
    if not nodes:
        raise RuntimeError("no kernel events in ORT's profile")
    return {n: (op, list(per_run.values())) for n, (op, per_run) in nodes.items()}


def kiln_profile(trace_path):
    """[(step name, op_type, replaced list or None, [us per profiled run])] in plan order; repeated names get
    '#k'. A trace of one profiled run (no args.run_us) gives its dur."""
    with open(trace_path) as f:
        d = json.load(f)
    out, seen = [], {}
    for e in d.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        name = e["name"]
        k = seen.get(name, 0)
        seen[name] = k + 1
        args = e.get("args", {})
        replaced = args.get("replaced", args.get("replaced_nodes"))
        out.append((name if k == 0 else f"{name}#{k}", args.get("op_type", e.get("cat", "?")), replaced,
                    list(args.get("run_us", [e["dur"]]))))
    return out


# ---------------------------------------------------------------- matching

class Graph:
    def __init__(self, onnx_path):
        m = onnx.load(onnx_path, load_external_data=False)
        self.op = {}
        self.producer = {}
        self.consumers = {}
        self.inputs = {}
        self.outputs = {}
        for i, n in enumerate(m.graph.node):
            name = n.name or f"{n.op_type}_{i}"
            self.op[name] = n.op_type
            self.inputs[name] = [t for t in n.input if t]
            self.outputs[name] = [t for t in n.output if t]
            for t in n.output:
                self.producer[t] = name
            for t in n.input:
                self.consumers.setdefault(t, []).append(name)

    def preds(self, n):
        return {self.producer[t] for t in self.inputs[n] if t in self.producer}

    def succs(self, n):
        return {c for t in self.outputs[n] for c in self.consumers.get(t, [])}


def ort_anchor(g, name):
    """The ONNX node an ORT node name stands for, or None."""
    for cand in (name, TOKEN.sub("", name)):
        if cand in g.op:
            return cand
        if cand.endswith("_nchwc") and cand[:-6] in g.producer:
            return g.producer[cand[:-6]]
        m = FUSION.match(cand)
        if m and m.group(1) in g.op:
            return m.group(1)
    return None


def cover(g, steps, anchor_of, may_absorb):
    """Per step {ONNX nodes}, the steps whose cover was inferred, and the ONNX nodes left unattributed.
    steps: {step: (op_type, replaced or None)} in execution order; may_absorb(step): whether the step may
    stand for more nodes than its anchor and its listed replaced nodes.

    An ONNX node no step is anchored at goes, repeating until nothing changes, to a neighbouring step that
    may absorb: first the producers of its inputs (an epilogue: the latest-running of them, the only one that
    can have all the node's other inputs), else the consumers of its outputs (the earliest-running). A
    convolution or matmul goes to its consumers first: an epilogue takes elementwise nodes, while ORT names a
    convolution with a fused activation after the activation's output."""
    order = {s: i for i, s in enumerate(steps)}
    covers, inferred = {}, set()
    for s, (op, replaced) in steps.items():
        if anchor_of[s] is not None:
            covers[s] = {anchor_of[s]} | set(r for r in (replaced or []) if r in g.op)
    owner = {}
    for s, c in covers.items():
        for n in c:
            owner.setdefault(n, s)
    pending = [n for n in g.op if n not in owner]
    changed = True
    while changed and pending:
        changed = False
        for n in list(pending):
            prod = {owner[p] for p in g.preds(n) if p in owner and may_absorb(owner[p])}
            cons = {owner[c] for c in g.succs(n) if c in owner and may_absorb(owner[c])}
            last_cons = cons and all(c in owner for c in g.succs(n))
            if prod and not (COMPUTE.search(g.op[n]) and last_cons):
                s = max(prod, key=order.get)
            elif last_cons:
                s = min(cons, key=order.get)
            else:
                continue
            covers[s].add(n)
            owner[n] = s
            inferred.add(s)
            pending.remove(n)
            changed = True
    return covers, inferred, [[n] for n in pending]


def match(g, kiln, ort):
    """Comparison units from kiln {step: (op, replaced, us)} and ORT {node: (op, us)}."""
    k_steps = {s: (op, rep) for s, (op, rep, _) in kiln.items()}
    o_steps = {s: (op, None) for s, (op, _) in ort.items()}
    k_anchor = {s: (s.split("#")[0] if s.split("#")[0] in g.op else None) for s in kiln}
    o_anchor = {s: ort_anchor(g, s) for s in ort}
    # kiln gives a fused step its own op type (FusedConv, ...); ORT keeps "Conv" for a convolution with a
    # fused sum and activation, so its compute nodes may stand for more than their anchor too.
    k_cov, k_inf, k_un = cover(g, k_steps, k_anchor, lambda s: k_steps[s][1] is None and k_steps[s][0] != g.op[k_anchor[s]])
    o_cov, o_inf, o_un = cover(g, o_steps, o_anchor,
                               lambda s: o_steps[s][0] != g.op[o_anchor[s]] or bool(COMPUTE.search(o_steps[s][0])))
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner = {}
    for side, cov in (("k", k_cov), ("o", o_cov)):
        for s, nodes in cov.items():
            find((side, s))
            for n in nodes:
                if n in owner:
                    parent[find((side, s))] = find(owner[n])
                else:
                    owner[n] = (side, s)
    groups = {}
    for key in list(parent):
        groups.setdefault(find(key), []).append(key)
    units = []
    for members in groups.values():
        ks = [s for side, s in members if side == "k"]
        os_ = [s for side, s in members if side == "o"]
        nodes = set().union(*[k_cov[s] for s in ks], *[o_cov[s] for s in os_])
        k_ops = sorted({kiln[s][0] for s in ks})
        o_ops = sorted({ort[s][0] for s in os_})
        onnx_ops = sorted({g.op[n] for n in nodes})
        compute = any(COMPUTE.search(o) for o in k_ops + o_ops + onnx_ops)
        order = min((list(kiln).index(s) for s in ks), default=10 ** 9)
        units.append({
            "kiln_steps": ks, "ort_nodes": os_, "onnx_nodes": sorted(nodes), "onnx_ops": onnx_ops,
            "kiln_ops": k_ops, "ort_ops": o_ops, "compute": compute, "order": order,
            "kiln_us": sum(kiln[s][2] for s in ks) if ks else None,
            "ort_us": sum(ort[s][1] for s in os_) if os_ else None,
            "inferred": bool(set(ks) & k_inf or set(os_) & o_inf),
        })
    units.sort(key=lambda u: u["order"])
    return {
        "units": units,
        "kiln_only": [{"step": s, "op": kiln[s][0], "us": kiln[s][2]} for s in kiln if k_anchor[s] is None],
        "ort_only": [{"node": s, "op": ort[s][0], "us": ort[s][1]} for s in ort if o_anchor[s] is None],
        "kiln_unattributed": k_un, "ort_unattributed": o_un,
        "replaced_in_trace": any(rep is not None for _, rep, _ in kiln.values()),
    }


# ---------------------------------------------------------------- running

def run_ort(a, onnx_path, inputs, d, r):
    prefix = os.path.join(d, f"ort_round{r}")
    for f in glob.glob(prefix + "*.json"):
        os.remove(f)
    cmd = ["node", os.path.join(BENCH, "ort_bench.js"), onnx_path, "--threads", str(a.threads), "--warmup", "1",
           "--iterations", str(a.iterations), "--json", prefix + ".lat", "--profile", prefix]
    for name, p in inputs:
        cmd += ["--input", f"{name}={p}"]
    return cmd, dict(os.environ), prefix


def run_kiln(a, onnx_path, inputs, d, r):
    trace = os.path.join(d, f"kiln_round{r}.trace.json")
    cmd = [a.engine_run, onnx_path, "--iterations", str(a.iterations), "--json", trace[:-11] + ".lat",
           "--profile-layers", trace, "--profile-runs", str(a.iterations), "--threads", str(a.threads)]
    if a.fusion_off:
        cmd += ["--disable-pass", "attention_fusion"]
    for name, p in inputs:
        cmd += ["--input", f"{name}={p}"]
    return cmd, dict(os.environ, OMP_NUM_THREADS=str(a.threads)), trace


def short(cmd):
    return " ".join(shlex.quote(c.replace(ROOT + os.sep, "")) for c in cmd)


def profile_workload(a, model, profile, case):
    key = f"{model}/{profile}"
    onnx_path = peer.model_path(model)
    inputs = peer.input_args(model, case)
    d = os.path.join(OUT, "op_profile", f"{model}_{profile}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rec = {"workload": key, "shape": peer.WORKLOAD_NOTES.get(key, ""), "ort_error": None, "kiln_error": None,
           "ort_p50_rounds": [], "kiln_p50_rounds": []}
    ort_runs, kiln_runs = {}, {}
    for r in range(a.rounds):
        for eng, make in (("ort", run_ort), ("kiln", run_kiln)):  # alternation: ORT then kiln every round
            if rec[f"{eng}_error"]:
                continue
            cmd, env, out = make(a, onnx_path, inputs, d, r)
            if r == 0:
                rec[f"{eng}_command"] = short(cmd)
            t0 = time.time()
            try:
                p = peer.run(cmd, env=env, timeout=a.timeout, cwd=BENCH if eng == "ort" else ROOT)
            except subprocess.TimeoutExpired:
                rec[f"{eng}_error"] = f"timed out after {a.timeout} s"
                continue
            if p.returncode != 0:
                rec[f"{eng}_error"] = peer.first_error_line(p)
                peer.log(f"  {key} round {r + 1}: {eng} FAILED: {rec[eng + '_error']}")
                continue
            base = out if eng == "ort" else out[:-11]
            with open(base + ".lat") as f:
                p50 = json.load(f)["latency_ms"]["p50"]
            rec[f"{eng}_p50_rounds"].append(p50)
            try:
                if eng == "ort":
                    for n, (op, us) in ort_profile(out, 1).items():
                        ort_runs.setdefault(n, (op, []))[1].extend(us)
                else:
                    for n, op, rep, us in kiln_profile(out):
                        kiln_runs.setdefault(n, (op, rep, []))[2].extend(us)
            except (OSError, ValueError, KeyError, RuntimeError) as e:
                rec[f"{eng}_error"] = f"reading its profile: {e}"
                continue
            peer.log(f"  {key} round {r + 1}/{a.rounds}: {eng:4s} p50 {p50:9.2f} ms (process {time.time() - t0:.0f} s)")
    if rec["ort_error"] or rec["kiln_error"]:
        return rec
    kiln = {n: (op, rep, median(us)) for n, (op, rep, us) in kiln_runs.items()}
    ort = {n: (op, median(us)) for n, (op, us) in ort_runs.items()}
    g = Graph(onnx_path)
    rec.update(match(g, kiln, ort))
    rec["onnx_op_of"] = {n: g.op[n] for regs in (rec["kiln_unattributed"], rec["ort_unattributed"]) for r in regs for n in r}
    rec["kiln_samples_us"] = {n: us for n, (_, _, us) in kiln_runs.items()}
    rec["ort_samples_us"] = {n: us for n, (_, us) in ort_runs.items()}
    rec["kiln_steps_total_us"] = sum(v[2] for v in kiln.values())
    rec["ort_nodes_total_us"] = sum(v[1] for v in ort.values())
    return rec


# ---------------------------------------------------------------- report

def fmt(us):
    return "—" if us is None else f"{us:.1f}"


def label(u):
    return "+".join(u["kiln_ops"]) or "(no kiln step)"


def checked(rec):
    return [u for u in rec.get("units", []) if not u["compute"]]


def slower(rec):
    return [u for u in checked(rec) if u["kiln_us"] is not None and u["ort_us"] is not None and u["kiln_us"] > u["ort_us"]]


def by_op(rec):
    tot = {}
    for u in checked(rec):
        if u["kiln_us"] is None:
            continue
        t = tot.setdefault(label(u), [0, 0.0, 0.0, 0])
        t[0] += 1
        t[1] += u["kiln_us"] or 0.0
        t[2] += u["ort_us"] or 0.0
        t[3] += u["kiln_us"] is not None and u["ort_us"] is not None and u["kiln_us"] > u["ort_us"]
    return sorted(tot.items(), key=lambda kv: -kv[1][1])


def summary_row(rec):
    if rec.get("ort_error") or rec.get("kiln_error"):
        err = errors_text(rec)
        return [rec["workload"], "FAILED", "", "", "", "", "", "", err]
    c = checked(rec)
    both = [u for u in c if u["kiln_us"] is not None and u["ort_us"] is not None]
    comp = [u for u in rec["units"] if u["compute"] and u["kiln_us"] is not None and u["ort_us"] is not None]
    return [rec["workload"], fmt(median(rec["ort_p50_rounds"]) * 1e3), fmt(median(rec["kiln_p50_rounds"]) * 1e3),
            str(len(c)), str(len(slower(rec))), fmt(sum(u["kiln_us"] for u in both)), fmt(sum(u["ort_us"] for u in both)),
            f"{fmt(sum(u['kiln_us'] for u in comp))} / {fmt(sum(u['ort_us'] for u in comp))}",
            f"{len(rec['kiln_only'])} kiln-only, {len(rec['ort_only'])} ORT-only steps; "
            f"{len(c) - len(both)} one-sided units; {sum(u['inferred'] for u in c)} inferred"]


def errors_text(rec):
    if rec.get("ort_error") and rec.get("ort_error") == rec.get("kiln_error"):
        return f"`{rec['ort_error']}`"
    return "; ".join(f"{e}: `{rec[e + '_error']}`" for e in ("ort", "kiln") if rec.get(e + "_error"))


def nodes_text(names, limit=3):
    names = [n.split("#")[0] for n in names]
    return ", ".join(f"`{n}`" for n in names[:limit]) + (f" +{len(names) - limit}" if len(names) > limit else "")


def write_markdown(path, result):
    m = result["machine"]
    v = result["versions"]
    lines = [
        "# Per-step profile: kiln vs ONNX Runtime (elementwise / normalisation / reduction / data movement)",
        "",
        f"Generated by `bench/op_profile_compare.py` on {result['finished']}. Command:",
        "", "```", result["command"], "```", "",
        f"- Machine: {m.get('Model name', '?')}, {m.get('CPU(s)', '?')} CPUs, SIMD: {m.get('simd') or '?'}; shared with other work.",
        f"- Load average (1, 5, 15 min) at start: {', '.join(f'{x:.2f}' for x in result['loadavg_start'])}; "
        f"at end: {', '.join(f'{x:.2f}' for x in result['loadavg_end'])}.",
        f"- onnxruntime-node {v['onnxruntime-node']} (node {v['node']}), kiln commit {v['kiln_commit']}"
        f"{' (+ uncommitted changes)' if v['kiln_worktree_dirty'] else ''}.",
        *([f"- kiln built with attention fusion off (`--disable-pass attention_fusion`)."] if result.get("fusion_off") else []),
        f"- {result['rounds']} rounds, ORT then kiln in every round; {result['threads']} threads each. ORT: 1 warm-up + "
        f"{result['iterations']} profiled runs per round (enableProfiling), a node's time = median of its kernel time "
        f"over all profiled runs. kiln: {result['iterations']} timed runs then {result['iterations']} per-step profiled "
        "runs (`--profile-layers --profile-runs`) per round, a step's time = median over all profiled runs.",
        "- Units: kiln steps and ORT nodes that cover the same ONNX nodes (see the script's docstring for the "
        "matching rules). Conv / MatMul / Gemm / attention units (and fused units containing them) are left out; "
        "every other unit is checked. 'inferred': the nodes a fused step absorbed were inferred from the graph "
        "(ORT never lists them"
        + ("" if result.get("replaced_in_trace") else "; kiln's trace of this commit does not either") + ").",
        "- Whole-run p50s (in us, like the steps) are from the same processes, with profiling on for ORT.",
        "",
        "## Summary", "",
        peer.md_table(["model/profile", "ORT p50 us", "kiln p50 us", "checked units", "kiln slower",
                       "kiln sum us (checked, both sides)", "ORT sum us (checked, both sides)",
                       "compute units kiln / ORT us (left out)", "notes"],
                      [summary_row(r) for r in result["workloads"]]),
    ]
    for rec in result["workloads"]:
        lines += ["", f"## {rec['workload']} ({rec['shape']})", ""]
        if rec.get("ort_error") or rec.get("kiln_error"):
            lines += [f"- FAILED: {errors_text(rec)}"]
            continue
        s = slower(rec)
        lines += [f"Checked units where kiln is slower than ORT ({len(s)} of {len(checked(rec))}), slowest ratio first:", ""]
        if s:
            rows = [[label(u), nodes_text(u["kiln_steps"]), "+".join(u["ort_ops"]), fmt(u["kiln_us"]), fmt(u["ort_us"]),
                     f"{u['kiln_us'] / u['ort_us']:.2f}" if u["ort_us"] else "inf", "yes" if u["inferred"] else ""]
                    for u in sorted(s, key=lambda u: -(u["kiln_us"] / max(u["ort_us"], 1e-9)))]
            lines.append(peer.md_table(["kiln op", "kiln step(s)", "ORT op(s)", "kiln us", "ORT us", "kiln/ORT", "inferred"], rows))
        else:
            lines.append("none.")
        gaps = sorted((u for u in rec["units"] if u["compute"] and u["kiln_us"] is not None and u["ort_us"] is not None),
                      key=lambda u: u["ort_us"] - u["kiln_us"])[:5]
        gaps = [u for u in gaps if u["kiln_us"] > u["ort_us"]]
        if gaps:
            lines += ["", "For context, the compute units (left out of the check) with the largest kiln - ORT gap: "
                      + "; ".join(f"{label(u)} {nodes_text(u['kiln_steps'], 1)} {fmt(u['kiln_us'])} vs "
                                  f"{'+'.join(u['ort_ops'])} {fmt(u['ort_us'])} us" for u in gaps)]
        lines += ["", "Per kiln op type (checked units with a kiln step; ORT us 0 when no ORT node covers them):", "",
                  peer.md_table(["kiln op", "units", "kiln us", "ORT us", "kiln slower"],
                                [[op, str(t[0]), fmt(t[1]), fmt(t[2]), str(t[3])] for op, t in by_op(rec)])]
        k_one = [u for u in checked(rec) if u["ort_us"] is None and u["kiln_us"] is not None]
        o_one = [u for u in checked(rec) if u["kiln_us"] is None and u["ort_us"] is not None]
        if k_one:
            lines += ["", "kiln steps no ORT node covers:", ""]
            lines += [f"- {label(u)} {nodes_text(u['kiln_steps'])}: {fmt(u['kiln_us'])} us" for u in k_one]
        if o_one:
            tot = {}
            for u in o_one:
                t = tot.setdefault("+".join(u["ort_ops"]), [0, 0.0])
                t[0] += 1
                t[1] += u["ort_us"]
            lines += ["", "ORT nodes no kiln step covers (kiln folded them at build time, or a kiln step with no "
                      "ONNX name, e.g. its attention, absorbed them): "
                      + ", ".join(f"{op} ×{n} ({us:.1f} us)" for op, (n, us) in sorted(tot.items(), key=lambda kv: -kv[1][1]))]
        for side, key in (("kiln", "kiln_only"), ("ORT", "ort_only")):
            if rec[key]:
                tot = {}
                for x in rec[key]:
                    t = tot.setdefault(x["op"], [0, 0.0])
                    t[0] += 1
                    t[1] += x["us"]
                lines += ["", f"{side} steps with no ONNX node of that name: "
                          + ", ".join(f"{op} ×{n} ({us:.1f} us)" for op, (n, us) in sorted(tot.items(), key=lambda kv: -kv[1][1]))]
        for side, key in (("kiln", "kiln_unattributed"), ("ORT", "ort_unattributed")):
            if rec[key]:
                ops = {}
                for region in rec[key]:
                    for n in region:
                        ops[result_graph_op(rec, n)] = ops.get(result_graph_op(rec, n), 0) + 1
                lines += ["", f"ONNX nodes no {side} step is known to cover (eliminated, folded, "
                          "or fused where the rule cannot tell): "
                          + ", ".join(f"{op} ×{n}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1]))]
    lines += ["", f"Every unit with both times and every sample: `{os.path.relpath(result['results_file'], ROOT)}`.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def result_graph_op(rec, node):
    return rec["onnx_op_of"].get(node, "?")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="ORT/kiln process pairs per workload (default 5)")
    p.add_argument("--iterations", type=int, default=10,
                   help="ORT: profiled runs per process; kiln: timed runs before its profiled run (default 10)")
    p.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    p.add_argument("--only", action="append", default=[],
                   help="keep workloads whose model or model/profile is NAME (repeatable)")
    p.add_argument("--zoo", action="store_true", help="add the torchvision zoo (models/torchvision_zoo.py) at batch 1")
    p.add_argument("--zoo-only", action="store_true", help="run the zoo only")
    p.add_argument("--fusion-off", action="store_true",
                   help="build kiln with attention fusion off (engine-run --disable-pass attention_fusion, as "
                        "`fusions: {attention: off}` does), like run_peer_bench.py's attention-off rows")
    p.add_argument("--export", action="store_true",
                   help="export missing models and cases as run_peer_bench.py does (default: report them missing)")
    p.add_argument("--engine-run", default=os.path.join(ROOT, "build", "engine-run"), help="(default build/engine-run)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds allowed for one engine process")
    p.add_argument("--results", default=os.path.join(BENCH, "results-op-profile.json"),
                   help="JSON with every unit and sample (default bench/results-op-profile.json)")
    p.add_argument("--markdown", default=os.path.join(BENCH, "RESULTS-op-profile.md"),
                   help="report, rewritten (default bench/RESULTS-op-profile.md)")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.iterations < 1 or a.threads < 1:
        p.error("--rounds, --iterations and --threads must be >= 1")
    a.engine_run = os.path.abspath(a.engine_run)
    if not os.access(a.engine_run, os.X_OK):
        p.error(f"{a.engine_run} is not an executable; build it: cmake --build build --target engine-run")
    if not os.path.isdir(os.path.join(BENCH, "node_modules", "onnxruntime-node")):
        p.error("onnxruntime-node is not installed: cd bench && npm install --ignore-scripts")
    pool = ([] if a.zoo_only else peer.WORKLOADS) + (peer.ZOO_WORKLOADS if a.zoo or a.zoo_only else [])
    selected = [w for w in pool if not a.only or w[0] in a.only or f"{w[0]}/{w[1]}" in a.only]
    if not selected:
        p.error(f"--only matches nothing; workloads: {', '.join(f'{m}/{c}' for m, c, _ in pool)}")

    command = "/usr/bin/python3 bench/op_profile_compare.py" + "".join(" " + shlex.quote(x) for x in sys.argv[1:])
    load_start = os.getloadavg()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    peer.log(f"load average at start: {' '.join(f'{x:.2f}' for x in load_start)}")
    records = []
    for model, profile, case in selected:
        peer.log(f"{model}/{profile}:")
        try:
            if a.export:
                peer.ensure_export(model, [case] if case else [])
            elif not os.path.exists(peer.model_path(model)):
                raise RuntimeError(f"no export {os.path.relpath(peer.model_path(model), ROOT)} (add --export, or run "
                                   f"bench/run_peer_bench.py --only {model} once)")
            if case is None:
                peer.ensure_gpt2_inputs(profile)
            records.append(profile_workload(a, model, profile, case or profile))
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            peer.log(f"  ERROR: {e}")
            records.append({"workload": f"{model}/{profile}", "shape": peer.WORKLOAD_NOTES.get(f"{model}/{profile}", ""),
                            "ort_error": str(e), "kiln_error": str(e), "ort_p50_rounds": [], "kiln_p50_rounds": []})
    load_end = os.getloadavg()
    result = {
        "command": command, "started": started,
        "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": peer.machine_info(), "loadavg_start": list(load_start), "loadavg_end": list(load_end),
        "versions": peer.versions(a), "fusion_off": a.fusion_off, "rounds": a.rounds, "iterations": a.iterations, "threads": a.threads,
        "replaced_in_trace": any(r.get("replaced_in_trace") for r in records),
        "results_file": a.results, "workloads": records,
    }
    with open(a.results, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    write_markdown(a.markdown, result)
    head = ["model/profile", "ORT p50 us", "kiln p50 us", "checked", "kiln slower", "kiln sum us", "ORT sum us",
            "compute kiln/ORT us", "notes"]
    print()
    print(peer.text_table(head, [summary_row(r) for r in records]))
    peer.log(f"load average at end: {' '.join(f'{x:.2f}' for x in load_end)}")
    peer.log(f"wrote {os.path.relpath(a.results, ROOT)} and {os.path.relpath(a.markdown, ROOT)}")
    return 0 if all(not r["ort_error"] and not r["kiln_error"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
