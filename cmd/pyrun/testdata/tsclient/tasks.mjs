// The TypeScript SDK's experimental tasks client (2025-11-25) for
// cmd/pyrun's tasks test: it starts the stdio server named by argv[2..]
// (pyrun stdio ...), lists the tools (the SDK learns there which take
// tasks), and makes one call through callToolStream, which creates a task
// when the server and the tool offer tasks, polls tasks/get and fetches
// tasks/result. It prints one JSON report on stdout; the Go test judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "pyrun-tasks-test", version: "1.0.0" });
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
await client.connect(transport);

const report = { serverTasks: client.getServerCapabilities()?.tasks ?? null, messages: [] };
const { tools } = await client.listTools();
report.taskSupport = tools.find((t) => t.name === "run_python_code")?.execution?.taskSupport ?? null;

const stream = client.experimental.tasks.callToolStream({
  name: "run_python_code",
  arguments: { python_code: "import time\ntime.sleep(0.5)\n6 * 7" },
});
for await (const m of stream) {
  const entry = { type: m.type };
  if (m.task) entry.status = m.task.status;
  if (m.task) entry.taskId = m.task.taskId;
  if (m.type === "result") entry.value = m.result.structuredContent?.return_value ?? null;
  if (m.type === "error") entry.error = String(m.error);
  report.messages.push(entry);
}
await client.close();
console.log(JSON.stringify(report));
