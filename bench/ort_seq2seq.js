#!/usr/bin/env node
// ONNX Runtime side of the seq2seq peer benchmark: greedy decoding over the three ONNX files of
// models/t5_seq2seq.py the seed's way (seed 001): encoder once, prefill once, then the step with
// the caches, cross-attention K/V and cur_pos passed in and out as ordinary tensors every step.
//
//   node ort_seq2seq.js DIR --input-dir SRC [--max-new-tokens N] [--threads T] [--json FILE]
//
// DIR holds encoder.onnx, prefill.onnx, step.onnx; SRC holds NNN/input_ids.npy and
// NNN/attention_mask.npy per source sequence. Per sequence: the generated tokens and every step's
// wall time (the session.run of one step, feeds built outside the timed region). Writes
// {"sequences": [{"tokens": [...], "step_ms": [...], "encoder_ms", "prefill_ms"}], "step_latency_ms": {...}}.
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
const {readNpy, stats} = require('./ort_bench.js');

function fail(msg) {
  process.stderr.write(`ort_seq2seq: ${msg}\n`);
  process.exit(1);
}

function argmaxLast(t) {
  const v = t.dims[t.dims.length - 1];
  const off = t.data.length - v;
  let best = 0;
  for (let i = 1; i < v; ++i) if (t.data[off + i] > t.data[off + best]) best = i;
  return best;
}

async function main() {
  const argv = process.argv.slice(2);
  const a = {dir: null, inputDir: null, maxNew: 24, threads: 2, json: null};
  for (let i = 0; i < argv.length; ++i) {
    const s = argv[i];
    const next = () => (i + 1 < argv.length ? argv[++i] : fail(`${s} needs a value`));
    if (s === '--input-dir') a.inputDir = next();
    else if (s === '--max-new-tokens') a.maxNew = Number(next());
    else if (s === '--threads') a.threads = Number(next());
    else if (s === '--json') a.json = next();
    else if (s.startsWith('--')) fail(`unknown option '${s}'`);
    else a.dir = s;
  }
  if (!a.dir || !a.inputDir) fail('usage: node ort_seq2seq.js DIR --input-dir SRC [--max-new-tokens N] [--threads T] [--json FILE]');
  const opts = {intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all'};
  const enc = await ort.InferenceSession.create(path.join(a.dir, 'encoder.onnx'), opts);
  const pre = await ort.InferenceSession.create(path.join(a.dir, 'prefill.onnx'), opts);
  const step = await ort.InferenceSession.create(path.join(a.dir, 'step.onnx'), opts);
  const sequences = [];
  const allSteps = [];
  const maxLen = 128;
  for (const name of fs.readdirSync(a.inputDir).sort()) {
    const d = path.join(a.inputDir, name);
    if (!fs.existsSync(path.join(d, 'input_ids.npy'))) continue;
    const ids = readNpy(path.join(d, 'input_ids.npy'));
    const mask = readNpy(path.join(d, 'attention_mask.npy'));
    let t0 = process.hrtime.bigint();
    const e = await enc.run({input_ids: ids, attention_mask: mask});
    const encoderMs = Number(process.hrtime.bigint() - t0) / 1e6;
    t0 = process.hrtime.bigint();
    const p = await pre.run({decoder_input_ids: new ort.Tensor('int64', BigInt64Array.from([0n]), [1, 1]),
                             encoder_hidden_states: e.encoder_hidden_states, encoder_attention_mask: mask});
    const prefillMs = Number(process.hrtime.bigint() - t0) / 1e6;
    let tok = argmaxLast(p.logits);
    const tokens = [tok];
    const stepMs = [];
    let ck = p.cache_k, cv = p.cache_v, pos = p.cur_pos;
    while (tok !== 1 && tokens.length < a.maxNew && Number(pos.data[0]) < maxLen) {
      const feeds = {last_token_id: new ort.Tensor('int64', BigInt64Array.from([BigInt(tok)]), [1, 1]), encoder_attention_mask: mask,
                     cache_k: ck, cache_v: cv, cross_k: p.cross_k, cross_v: p.cross_v, cur_pos: pos};
      t0 = process.hrtime.bigint();
      const s = await step.run(feeds);
      stepMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
      tok = argmaxLast(s.logits);
      tokens.push(tok);
      ck = s.cache_k_out; cv = s.cache_v_out; pos = s.cur_pos_out;
    }
    allSteps.push(...stepMs);
    sequences.push({name, tokens, step_ms: stepMs, encoder_ms: encoderMs, prefill_ms: prefillMs});
  }
  const out = {sequences, step_latency_ms: stats(allSteps), steps: allSteps.length, ort_version: require('onnxruntime-node/package.json').version};
  console.log(`ort: ${sequences.length} sequences, ${allSteps.length} steps, step p50 ${out.step_latency_ms.p50} ms`);
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(out) + '\n');
}

main().catch((e) => fail(e && e.message ? e.message.split('\n')[0] : String(e)));
