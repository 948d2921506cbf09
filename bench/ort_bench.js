#!/usr/bin/env node
// ONNX Runtime side of kiln's peer benchmark: the same job as `engine-run MODEL.onnx --input ... --json`,
// done by onnxruntime-node (CPU execution provider), so both engines see the same model and inputs.
//
//   node ort_bench.js MODEL.onnx --input NAME=FILE.npy ... [--threads T] [--warmup W] [--iterations N]
//       [--json FILE] [--output-dir DIR] [--config KEY=VALUE ...] [--profile PREFIX]
//
// Session: intraOpNumThreads T (default 2), interOpNumThreads 1, sequential execution, graph
// optimization level 'all'. Runs W warm-ups (default 1, like engine-run) then N timed runs (default 10)
// and prints/writes {"latency_ms": {min, p50, p90, p99, max, mean}, "iterations": N, ...}, with the same
// nearest-rank percentiles as kiln's profiles/latency_stats.cpp. --output-dir writes each output as
// DIR/<name>.npy (name sanitized as engine-run does) for comparing the two engines' results. --config adds an
// ORT session config entry (onnxruntime_session_options_config_keys.h), e.g. session.intra_op.allow_spinning=0.
// --profile PREFIX turns on ORT's own profiler (enableProfiling) for the whole session and ends it after the
// timed runs: ORT writes PREFIX_<date>.json, a Chrome trace with each node's kernel time per run
// (bench/run_op_bench.py reads it).
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const USAGE = 'usage: node ort_bench.js MODEL.onnx --input NAME=FILE.npy ... [--threads T] [--warmup W] ' +
    '[--iterations N] [--json FILE] [--output-dir DIR] [--config KEY=VALUE ...] [--profile PREFIX]';

// npy descr -> [ORT tensor type, typed array constructor, bytes per element].
const NPY_TYPES = {
  '<f4': ['float32', Float32Array, 4],
  '<i8': ['int64', BigInt64Array, 8],
  '|b1': ['bool', Uint8Array, 1],
  '<i4': ['int32', Int32Array, 4],
  '<f2': ['float16', Uint16Array, 2],  // raw bits, as ORT's float16 tensors take them
};
const ORT_TO_DESCR = {float32: '<f4', int64: '<i8', bool: '|b1', int32: '<i4'};

function fail(msg) {
  process.stderr.write(`ort_bench: ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const a = {model: null, inputs: [], threads: 2, warmup: 1, iterations: 10, json: null, outputDir: null, config: {}, profile: null};
  const intArg = (flag, v, min) => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < min) fail(`${flag} needs an integer >= ${min}, got '${v}'`);
    return n;
  };
  for (let i = 0; i < argv.length; ++i) {
    const s = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${s} needs a value`);
      return argv[++i];
    };
    if (s === '--input') {
      const spec = next();
      const eq = spec.indexOf('=');
      if (eq <= 0) fail(`--input '${spec}': expected NAME=FILE.npy`);
      a.inputs.push([spec.slice(0, eq), spec.slice(eq + 1)]);
    } else if (s === '--config') {
      const spec = next();
      const eq = spec.indexOf('=');
      if (eq <= 0) fail(`--config '${spec}': expected KEY=VALUE`);
      a.config[spec.slice(0, eq)] = spec.slice(eq + 1);
    } else if (s === '--threads') a.threads = intArg(s, next(), 1);
    else if (s === '--warmup') a.warmup = intArg(s, next(), 0);
    else if (s === '--iterations') a.iterations = intArg(s, next(), 1);
    else if (s === '--json') a.json = next();
    else if (s === '--output-dir') a.outputDir = next();
    else if (s === '--profile') a.profile = next();
    else if (s === '-h' || s === '--help') { console.log(USAGE); process.exit(0); }
    else if (s.startsWith('--')) fail(`unknown option '${s}'\n${USAGE}`);
    else if (a.model === null) a.model = s;
    else fail(`unexpected argument '${s}'\n${USAGE}`);
  }
  if (a.model === null) fail(USAGE);
  return a;
}

// Reads a .npy file (format versions 1-3; little-endian, C order; dtypes f4, i8, b1, i4) into an ORT tensor.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    throw new Error(`${file}: not a .npy file`);
  }
  const major = buf.readUInt8(6);
  let headerLen, headerStart;
  if (major === 1) { headerLen = buf.readUInt16LE(8); headerStart = 10; }
  else if (major === 2 || major === 3) { headerLen = buf.readUInt32LE(8); headerStart = 12; }
  else throw new Error(`${file}: unsupported .npy version ${major}`);
  const header = buf.toString('latin1', headerStart, headerStart + headerLen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${file}: malformed header ${JSON.stringify(header)}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran-order arrays are not supported`);
  const t = NPY_TYPES[descr[1]];
  if (!t) throw new Error(`${file}: dtype '${descr[1]}' is not supported (f4, f2, i8, b1, i4 little-endian)`);
  const [type, Ctor, size] = t;
  const dims = shape[1].split(',').map((x) => x.trim()).filter((x) => x.length > 0).map(Number);
  const count = dims.reduce((p, d) => p * d, 1);
  const dataStart = headerStart + headerLen;
  if (buf.length - dataStart !== count * size) {
    throw new Error(`${file}: ${buf.length - dataStart} data bytes for shape [${dims}] of ${descr[1]}`);
  }
  // Copy into a fresh ArrayBuffer: the typed array needs an aligned offset, which a file buffer does not promise.
  const data = new Ctor(buf.buffer.slice(buf.byteOffset + dataStart, buf.byteOffset + dataStart + count * size));
  return new ort.Tensor(type, data, dims);
}

function writeNpy(file, tensor) {
  const descr = ORT_TO_DESCR[tensor.type];
  if (!descr) throw new Error(`output type '${tensor.type}' cannot be written as .npy here`);
  const dims = tensor.dims;
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.writeUInt8(0x93, 0);
  pre.write('NUMPY', 1, 'latin1');
  pre.writeUInt8(1, 6);
  pre.writeUInt8(0, 7);
  pre.writeUInt16LE(header.length, 8);
  const d = tensor.data;
  const body = Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

function percentile(sorted, p) {
  let rank = Math.ceil((p / 100) * sorted.length);
  rank = Math.min(Math.max(rank, 1), sorted.length);
  return sorted[rank - 1];
}

function stats(samples) {
  const s = [...samples].sort((x, y) => x - y);
  const r4 = (v) => Math.round(v * 1e4) / 1e4;
  return {
    min: r4(s[0]), p50: r4(percentile(s, 50)), p90: r4(percentile(s, 90)), p99: r4(percentile(s, 99)),
    max: r4(s[s.length - 1]), mean: r4(s.reduce((p, v) => p + v, 0) / s.length),
  };
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const options = {
    executionProviders: ['cpu'],
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
  if (a.profile) {
    options.enableProfiling = true;
    options.profileFilePrefix = a.profile;
  }
  // The Node binding takes config entries as a nested object whose path is the dotted key.
  if (Object.keys(a.config).length > 0) {
    options.extra = {};
    for (const [key, value] of Object.entries(a.config)) {
      const parts = key.split('.');
      let o = options.extra;
      for (const p of parts.slice(0, -1)) {
        if (typeof o[p] !== 'object') o[p] = {};
        o = o[p];
      }
      o[parts[parts.length - 1]] = value;
    }
  }
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, options);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

  const feeds = {};
  for (const [name, file] of a.inputs) {
    if (feeds[name]) fail(`input '${name}' is given twice`);
    if (!session.inputNames.includes(name)) {
      fail(`the model has no input named '${name}' (inputs: ${session.inputNames.join(', ')})`);
    }
    feeds[name] = readNpy(file);
  }
  for (const name of session.inputNames) {
    if (!feeds[name]) fail(`missing input '${name}': pass --input ${name}=FILE.npy`);
  }

  let out;
  for (let i = 0; i < a.warmup; ++i) out = await session.run(feeds);
  const samples = [];
  for (let i = 0; i < a.iterations; ++i) {
    const s = process.hrtime.bigint();
    out = await session.run(feeds);
    samples.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  if (a.profile) session.endProfiling();
  const st = stats(samples);
  const result = {latency_ms: st, iterations: a.iterations, warmup: a.warmup, threads: a.threads,
    session_create_ms: Math.round(loadMs * 10) / 10, ort_version: ort.env.versions.common, config: a.config};
  console.log(`latency over ${a.iterations} iterations (after ${a.warmup} warm-up): min ${st.min.toFixed(3)} ms  ` +
      `p50 ${st.p50.toFixed(3)} ms  p90 ${st.p90.toFixed(3)} ms  p99 ${st.p99.toFixed(3)} ms  ` +
      `max ${st.max.toFixed(3)} ms  mean ${st.mean.toFixed(3)} ms`);
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(result) + '\n');
  if (a.outputDir) {
    if (!out) out = await session.run(feeds);
    fs.mkdirSync(a.outputDir, {recursive: true});
    for (const name of session.outputNames) {
      const safe = name.replace(/[^A-Za-z0-9._-]/g, '_');
      writeNpy(path.join(a.outputDir, (safe === '' || safe === '.' || safe === '..' ? '_' + safe : safe) + '.npy'),
          out[name]);
    }
  }
}

// bench/ort_seq2seq.js reuses the .npy reader/writer and the statistics.
module.exports = {readNpy, writeNpy, stats};
if (require.main === module) main().catch((e) => fail(e && e.message ? e.message.split('\n')[0] : String(e)));
