// scripts/bench's tsclient tier: pyrun driven by the MCP TypeScript SDK's
// client over stdio, the way MCP hosts embed it (StdioClientTransport with
// its defaults: the SDK's own environment, pyrun's stderr inherited;
// Client.listTools, then Client.callTool). The Go side (tsclient.go) passes
// one JSON argument, runs blocks of the floor's calls when asked (a
// {"floor": true} line on stdout, answered by a line on stdin) and reads
// one JSON report, the last line on stdout; it computes the statistics. Every time is taken here with performance.now(), so the
// client's own work (zod parsing of every message, the output schema's
// check of structuredContent) is in it, as a host sees it. Any failure
// exits 1 with the error on stderr.
//
// The argument: {command, args, runs, rounds, block, warmup, first, code,
// want, blocks, expected}: pyrun's command line, the fresh spawns to time
// (one more is made first and not counted), the rounds of settled calls
// and the calls in each, timed after warmup calls, the warm calls to time
// on each fresh server, the code of a warm call and the JSON of its
// return_value, and the agent run's blocks with the line the last one
// prints.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const cfg = JSON.parse(process.argv[2]);
const tool = "run_python_code";

// call runs code (with extra arguments) and checks that it succeeded.
async function call(client, code, extra = {}) {
  const res = await client.callTool({ name: tool, arguments: { python_code: code, ...extra } });
  const sc = res.structuredContent ?? {};
  if (res.isError || sc.status !== "success") {
    throw new Error(`${code.slice(0, 40)}: ${res.content?.map((c) => c.text ?? "").join("")}`);
  }
  return sc;
}

async function warmCall(client) {
  const sc = await call(client, cfg.code);
  if (JSON.stringify(sc.return_value) !== cfg.want) {
    throw new Error(`${cfg.code} returned ${JSON.stringify(sc.return_value)}, want ${cfg.want}`);
  }
}

// connect starts a stdio server and connects to it, the SDK's defaults
// left as they are (its environment; the server's stderr inherited).
async function connect(command, args) {
  const client = new Client({ name: "pyrun-bench-tsclient", version: "1.0.0" });
  await client.connect(new StdioClientTransport({ command, args }));
  const { tools } = await client.listTools();
  if (!tools.some((t) => t.name === tool && t.outputSchema)) throw new Error(`no ${tool} with an outputSchema`);
  return { client, tools };
}

// spawn starts pyrun and makes its first call, as a host does (connect:
// the process and the initialize handshake; tools/list, which also makes
// the client check structuredContent against the tool's outputSchema from
// then on; the call), and times it all.
async function spawn() {
  const t0 = performance.now();
  const { client, tools } = await connect(cfg.command, cfg.args);
  await warmCall(client);
  return { client, tools, firstMS: performance.now() - t0 };
}

// timed calls fn n times and returns each call's time.
async function timed(n, fn) {
  const ds = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn(i);
    ds.push(performance.now() - t0);
  }
  return ds;
}

// series is warm calls timed in blocks, and the client's CPU time (Node's,
// all its threads) per call over them.
function series() {
  const r = { ms: [], wall_ms: 0, cpu_us: 0 };
  r.block = async (client, n) => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    r.ms.push(...(await timed(n, () => warmCall(client))));
    r.wall_ms += performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    r.cpu_us += cpu.user + cpu.system;
  };
  r.json = () => ({ ms: r.ms, wall_ms: r.wall_ms, client_cpu_us: r.cpu_us / r.ms.length });
  return r;
}

// The Go side answers a {"floor": true} line on stdout with a block of the
// floor's calls, then a line on stdin: the settled calls and the floor's
// take turns, so that both see the same load.
const control = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function floorBlock() {
  process.stdout.write(JSON.stringify({ floor: true }) + "\n");
  const { done } = await control.next();
  if (done) throw new Error("the Go side closed stdin before a floor block ended");
}

// agent runs the blocks replayed statelessly (call i runs blocks 1..i),
// then as calls in one session ("new" first, end_session on the last).
async function agent(client) {
  let t0 = performance.now();
  let sc;
  for (let i = 0; i < cfg.blocks.length; i++) sc = await call(client, cfg.blocks.slice(0, i + 1).join("\n"));
  const replayMS = performance.now() - t0;
  if (sc.stdout.trim() !== cfg.expected) throw new Error(`the replay printed ${JSON.stringify(sc.stdout)}`);

  t0 = performance.now();
  let id = "new";
  let startMS = 0;
  for (let i = 0; i < cfg.blocks.length; i++) {
    const extra = { session_id: id };
    if (i === cfg.blocks.length - 1) extra.end_session = true;
    sc = await call(client, cfg.blocks[i], extra);
    if (i === 0) {
      startMS = performance.now() - t0;
      id = sc.session_id;
    }
  }
  const sessionMS = performance.now() - t0;
  if (sc.stdout.trim() !== cfg.expected) throw new Error(`the session printed ${JSON.stringify(sc.stdout)}`);
  return { replay_ms: replayMS, session_ms: sessionMS, session_start_ms: startMS };
}

const sdk = JSON.parse(
  readFileSync(new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url), "utf8"),
);
const report = { node: process.version, sdk: sdk.version, spawn_ms: [], fresh_ms: [], agent_fresh: [], agent_settled: [] };

// Fresh servers: spawn to first result, then the next calls. Run 0 only
// warms the machine's caches (and Node's) and is not counted.
for (let r = 0; r <= cfg.runs; r++) {
  const { client, firstMS } = await spawn();
  const fresh = await timed(cfg.first, () => warmCall(client));
  await client.close();
  if (r > 0) {
    report.spawn_ms.push(firstMS);
    report.fresh_ms.push(fresh);
  }
}
// The agent run on fresh servers: the first thing after the first result
// (the caches are warm by now: every run counts).
for (let r = 0; r < cfg.runs; r++) {
  const { client } = await spawn();
  report.agent_fresh.push(await agent(client));
  await client.close();
}
// One server, settled: warmup calls, then cfg.rounds rounds of a block of
// the floor's calls (in Go), one of pyrun's and one of the client's floor:
// the same calls to constserver.mjs, which answers each at once with
// pyrun's own result, prepared. Then the agent runs again.
const { client, tools } = await spawn();
const result = await client.callTool({ name: tool, arguments: { python_code: cfg.code } });
const constServer = new URL("./constserver.mjs", import.meta.url).pathname;
const nul = await connect(process.execPath, [constServer, JSON.stringify(tools), JSON.stringify(result)]);
await timed(cfg.warmup, () => warmCall(client));
await timed(cfg.warmup, () => warmCall(nul.client));
const settled = series();
const constCalls = series();
for (let r = 0; r < cfg.rounds; r++) {
  await floorBlock();
  await settled.block(client, cfg.block);
  await constCalls.block(nul.client, cfg.block);
}
report.settled = settled.json();
report.const_server = constCalls.json();
await nul.client.close();
for (let r = 0; r < cfg.runs; r++) report.agent_settled.push(await agent(client));
await client.close();
process.stdout.write(JSON.stringify(report) + "\n");
process.stdin.destroy();
