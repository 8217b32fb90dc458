// run-vectors.mjs runs every conformance vector file (tests/vectors/*.json)
// through rl.wasm under Node.js's built-in WASI, using nothing but what
// wasm/ABI.md documents. No npm dependencies.
//
//   node wasm/node/run-vectors.mjs [rl.wasm] [vectors-dir]
//
// It prints a summary and exits 1 on any mismatch.

import { readFileSync, readdirSync } from "node:fs";
import { WASI } from "node:wasi";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const wasmPath = process.argv[2] ?? join(here, "..", "rl.wasm");
const vectorsDir = process.argv[3] ?? join(here, "..", "..", "tests", "vectors");

// ---- The ABI (wasm/ABI.md) -------------------------------------------------

const ABI_VERSION = 2;
const MAX_LIMITS = 16;
const LOG_SLOTS = 4097;
const HEADER_BYTES = 64;
const SLOT_HEAD_BYTES = 168;
const SLOT_BYTES = SLOT_HEAD_BYTES + 8 * LOG_SLOTS;
const BUFFER_BYTES = HEADER_BYTES + MAX_LIMITS * SLOT_BYTES;
// Header offsets.
const H_STATUS = 0, H_INDEX = 8, H_WRITTEN = 16;
// Slot offsets.
const O = {
  limitAlgorithm: 0, limit: 8, window: 16, rate: 24,
  stateAlgorithm: 32, t: 40, x: 48, y: 56, logLen: 64, logCap: 72,
  decided: 80, allowed: 88, decLimit: 96, remaining: 104, resetAfter: 112,
  retryAfter: 120, delay: 128, nextAfter: 136, l: 144, w: 152, r: 160, log: SLOT_HEAD_BYTES,
};

class RL {
  constructor(bytes) {
    const wasi = new WASI({ version: "preview1", args: [], env: {}, returnOnExit: true });
    const module = new WebAssembly.Module(bytes);
    this.instance = new WebAssembly.Instance(module, {
      wasi_snapshot_preview1: wasi.wasiImport,
    });
    wasi.initialize(this.instance); // a reactor: calls _initialize once
    this.x = this.instance.exports;
    const got = this.x.abi_version();
    if (got !== ABI_VERSION) throw new Error(`abi_version ${got}, want ${ABI_VERSION}`);
    if (this.x.rl_buffer_size() >>> 0 !== BUFFER_BYTES) throw new Error("rl_buffer_size mismatch");
    if (this.x.rl_max_limits() !== MAX_LIMITS) throw new Error("rl_max_limits mismatch");
    if (this.x.rl_log_slots() !== LOG_SLOTS) throw new Error("rl_log_slots mismatch");
    this.buf = this.x.rl_buffer() >>> 0;
  }

  // view returns a DataView on the buffer (memory may have grown).
  view() {
    return new DataView(this.x.memory.buffer, this.buf, BUFFER_BYTES);
  }

  put(v, i, limit, state) {
    const s = HEADER_BYTES + i * SLOT_BYTES;
    v.setBigInt64(s + O.limitAlgorithm, limit.algorithm, true);
    v.setBigInt64(s + O.limit, limit.limit, true);
    v.setBigInt64(s + O.window, limit.window, true);
    v.setBigInt64(s + O.rate, limit.rate, true);
    v.setBigInt64(s + O.stateAlgorithm, state.algorithm, true);
    v.setBigInt64(s + O.t, state.t, true);
    v.setBigInt64(s + O.x, state.x, true);
    v.setBigInt64(s + O.y, state.y, true);
    v.setBigInt64(s + O.l, state.l, true);
    v.setBigInt64(s + O.w, state.w, true);
    v.setBigInt64(s + O.r, state.r, true);
    const len = Math.min(state.log.length, LOG_SLOTS);
    const cap = Math.min(state.logCap, LOG_SLOTS);
    v.setBigInt64(s + O.logLen, BigInt(len), true);
    v.setBigInt64(s + O.logCap, BigInt(cap), true);
    if (len < LOG_SLOTS) {
      for (let j = 0; j < len; j++) v.setBigInt64(s + O.log + 8 * j, state.log[j], true);
    }
  }

  decision(v, i) {
    const s = HEADER_BYTES + i * SLOT_BYTES;
    if (v.getBigInt64(s + O.decided, true) === 0n) return null;
    return {
      allowed: v.getBigInt64(s + O.allowed, true) !== 0n,
      limit: v.getBigInt64(s + O.decLimit, true),
      remaining: v.getBigInt64(s + O.remaining, true),
      reset_after: v.getBigInt64(s + O.resetAfter, true),
      retry_after: v.getBigInt64(s + O.retryAfter, true),
      delay: v.getBigInt64(s + O.delay, true),
      next_after: v.getBigInt64(s + O.nextAfter, true),
    };
  }

  // state reads the new state of slot i; its log keeps the caller's capacity.
  state(v, i, old) {
    const s = HEADER_BYTES + i * SLOT_BYTES;
    const len = Number(v.getBigInt64(s + O.logLen, true));
    const log = [];
    for (let j = 0; j < len; j++) log.push(v.getBigInt64(s + O.log + 8 * j, true));
    return {
      algorithm: v.getBigInt64(s + O.stateAlgorithm, true),
      t: v.getBigInt64(s + O.t, true),
      x: v.getBigInt64(s + O.x, true),
      y: v.getBigInt64(s + O.y, true),
      l: v.getBigInt64(s + O.l, true),
      w: v.getBigInt64(s + O.w, true),
      r: v.getBigInt64(s + O.r, true),
      log,
      logCap: old.logCap,
    };
  }

  // call decides cost against limits with states: op is "take", "peek" or
  // "settle" (cost is then the delta; always rl_settle_all); single selects
  // rl_take/rl_peek (one limit) over rl_take_all/rl_peek_all.
  // It returns {status, index, decisions, states}.
  call(op, single, limits, states, now, cost) {
    let v = this.view();
    limits.forEach((l, i) => this.put(v, i, l, states[i]));
    let status;
    if (op === "settle") {
      status = this.x.rl_settle_all(limits.length, now, cost);
    } else if (single) {
      status = (op === "take" ? this.x.rl_take : this.x.rl_peek)(now, cost);
    } else {
      status = (op === "take" ? this.x.rl_take_all : this.x.rl_peek_all)(limits.length, now, cost);
    }
    v = this.view();
    const index = Number(v.getBigInt64(H_INDEX, true));
    const decisions = limits.map((_, i) => this.decision(v, i));
    let out = states;
    if (status === 0 && v.getBigInt64(H_WRITTEN, true) !== 0n) {
      out = states.map((s, i) => this.state(v, i, s));
    }
    return { status, index, decisions, states: out };
  }
}

// ---- JSON with every integer as a BigInt -----------------------------------

function parseJSON(text) {
  let i = 0;
  const ws = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
  const fail = (msg) => { throw new Error(`JSON: ${msg} at ${i}`); };
  function value() {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const o = {};
      ws();
      if (text[i] === "}") { i++; return o; }
      for (;;) {
        ws();
        const k = string();
        ws();
        if (text[i++] !== ":") fail("expected :");
        o[k] = value();
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; return o; }
        fail("expected , or }");
      }
    }
    if (c === "[") {
      i++;
      const a = [];
      ws();
      if (text[i] === "]") { i++; return a; }
      for (;;) {
        a.push(value());
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; return a; }
        fail("expected , or ]");
      }
    }
    if (c === '"') return string();
    if (text.startsWith("true", i)) { i += 4; return true; }
    if (text.startsWith("false", i)) { i += 5; return false; }
    if (text.startsWith("null", i)) { i += 4; return null; }
    const m = /^-?(0|[1-9][0-9]*)/.exec(text.slice(i, i + 32));
    if (!m) fail("unexpected character");
    i += m[0].length;
    if (".eE".includes(text[i])) fail("non-integer number");
    return BigInt(m[0]);
  }
  function string() {
    if (text[i] !== '"') fail("expected string");
    let j = i + 1;
    while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
    const s = JSON.parse(text.slice(i, j + 1));
    i = j + 1;
    return s;
  }
  const v = value();
  ws();
  if (i !== text.length) fail("trailing data");
  return v;
}

// ---- The runner (tests/vectors/README.md, "Running a case") ----------------

const fresh = () => ({ algorithm: 0n, t: 0n, x: 0n, y: 0n, l: 0n, w: 0n, r: 0n, log: [], logCap: 4096 });
const toState = (s) => ({
  algorithm: s.algorithm, t: s.t, x: s.x, y: s.y, l: s.l ?? 0n, w: s.w ?? 0n, r: s.r ?? 0n,
  log: [...(s.log ?? [])], logCap: 4096 + (s.log ?? []).length,
});
const show = (x) => JSON.stringify(x, (_, v) => (typeof v === "bigint" ? v.toString() : v));

function runCase(rl, c, mismatch) {
  let limits = c.limits;
  let states = limits.map(fresh);
  (c.states ?? []).forEach((s, i) => { states[i] = toState(s); });
  c.steps.forEach((st, k) => {
    const where = `${c.id} step ${k}`;
    if (st.limits) limits = st.limits;
    (st.set_states ?? []).forEach((s, i) => { states[i] = toState(s); });
    let status = 0, index = 0, decisions = null;
    if (st.op === "reset") {
      states = limits.map(fresh);
    } else if (st.op === "take" || st.op === "peek" || st.op === "settle") {
      const r = rl.call(st.op, limits.length === 1, limits, states, st.now, st.cost);
      ({ status, index, decisions } = r);
      if (st.op !== "peek" && status === 0) states = r.states;
    } else {
      throw new Error(`${where}: unknown op ${st.op}`);
    }
    const e = st.expect;
    const wantStatus = Number(e.error_code ?? 0n);
    if (status !== wantStatus) return mismatch(`${where}: status ${status}, want ${wantStatus} (${e.error ?? "ok"})`);
    if (BigInt(index) !== e.index) return mismatch(`${where}: index ${index}, want ${e.index}`);
    if (status === 0 && st.op !== "reset") {
      const fields = ["allowed", "limit", "remaining", "reset_after", "retry_after", "delay", "next_after"];
      decisions.forEach((d, j) => {
        const w = e.decisions[j];
        if (d === null || fields.some((k) => d[k] !== w[k])) {
          mismatch(`${where} limit ${j}: decision ${show(d)}, want ${show(w)}`);
        }
      });
    }
    states.forEach((s, j) => {
      const w = e.states[j];
      const got = show({ algorithm: s.algorithm, t: s.t, x: s.x, y: s.y, l: s.l, w: s.w, r: s.r, log: s.log });
      const want = show({ algorithm: w.algorithm, t: w.t, x: w.x, y: w.y, l: w.l ?? 0n, w: w.w ?? 0n, r: w.r ?? 0n, log: w.log ?? [] });
      if (got !== want) mismatch(`${where} limit ${j}: state ${got}, want ${want}`);
    });
  });
}

const rl = new RL(readFileSync(wasmPath));
const files = readdirSync(vectorsDir).filter((f) => f.endsWith(".json")).sort();
let cases = 0, steps = 0, failures = 0;
for (const name of files) {
  const f = parseJSON(readFileSync(join(vectorsDir, name), "utf8"));
  if (f.schema !== "rl-vectors/v2") throw new Error(`${name}: schema ${f.schema}`);
  for (const c of f.cases) {
    cases++;
    steps += c.steps.length;
    runCase(rl, c, (msg) => {
      failures++;
      if (failures <= 20) console.error(`FAIL ${name}: ${msg}`);
    });
  }
}
console.log(`rl.wasm under Node.js ${process.version}: ${files.length} files, ${cases} cases, ${steps} steps, ${failures} mismatches`);
if (files.length === 0 || failures > 0) process.exit(1);
