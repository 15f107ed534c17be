// A TypeScript SDK client (it speaks 2025-11-25) for cmd/pyrun's revisions
// test: against pyrun's /mcp (the URL is argv[2]) it sets the session's log
// level, runs a call with a progress token, then cancels a running call
// and makes one more. It prints one JSON report on stdout; the Go test
// judges it. Any failure exits 1 with the error on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const url = new URL(process.argv[2]);
const report = { logs: [], progress: [], cancelled: null, after: null };

const client = new Client({ name: "pyrun-tsclient-test", version: "1.0.0" });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  report.logs.push({ level: n.params.level, stream: n.params.data?.stream, text: n.params.data?.text });
});
const transport = new StreamableHTTPClientTransport(url);
await client.connect(transport);
report.protocolVersion = transport.protocolVersion;

const text = (res) => res.content.map((c) => c.text ?? "").join("");

// No level set yet: this call's output must not come as log messages.
await client.callTool({ name: "run_python_code", arguments: { python_code: "print('before-level')" } });

await client.setLoggingLevel("info");
const live = await client.callTool(
  {
    name: "run_python_code",
    arguments: { python_code: "import time\nfor i in range(6):\n    print(f'line {i}')\n    time.sleep(0.2)\n" },
  },
  undefined,
  { onprogress: (p) => report.progress.push({ progress: p.progress, message: p.message ?? "" }) },
);
report.live = { isError: live.isError ?? false, text: text(live) };

// Cancel a call that never ends by itself, once it runs.
const ac = new AbortController();
const began = Date.now();
const running = client.callTool(
  { name: "run_python_code", arguments: { python_code: "while True:\n    pass\n" } },
  undefined,
  {
    signal: ac.signal,
    onprogress: (p) => {
      if ((p.message ?? "").startsWith("running for")) ac.abort("test cancels");
    },
  },
);
try {
  await running;
  report.cancelled = { rejected: false };
} catch (e) {
  report.cancelled = { rejected: true, error: String(e), ms: Date.now() - began };
}
// With one worker, this call runs only once the cancelled one has stopped.
const t0 = Date.now();
const after = await client.callTool({ name: "run_python_code", arguments: { python_code: "print('after')" } });
report.after = { isError: after.isError ?? false, text: text(after), ms: Date.now() - t0 };

await client.close();
process.stdout.write(JSON.stringify(report) + "\n");
