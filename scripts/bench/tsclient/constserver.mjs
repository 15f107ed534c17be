// The client's floor for scripts/bench's tsclient tier: a stdio MCP server
// that does nothing but answer. It lists the tools given as argv[2] and
// answers every tools/call at once with the result given as argv[3]
// (pyrun's own, for the same call), each answer a line prepared in
// advance, with no SDK on this side: a client timing calls to it times
// itself (its SDK's JSON-RPC, zod and output-schema checks) and the pipes,
// what a call costs before any server does any work.
const tools = JSON.parse(process.argv[2]);
const result = JSON.parse(process.argv[3]);
const answer = (id, res) => JSON.stringify({ jsonrpc: "2.0", id, result: res }) + "\n";
const callTail = answer(0, result).slice(`{"jsonrpc":"2.0","id":0`.length);

let buf = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buf += chunk;
  for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
    const msg = JSON.parse(buf.slice(0, i));
    buf = buf.slice(i + 1);
    if (msg.id === undefined) continue; // a notification
    switch (msg.method) {
      case "initialize":
        process.stdout.write(answer(msg.id, {
          protocolVersion: msg.params.protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: "pyrun-bench-constserver", version: "1.0.0" },
        }));
        break;
      case "tools/list":
        process.stdout.write(answer(msg.id, { tools }));
        break;
      case "tools/call":
        process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(msg.id)}${callTail}`);
        break;
      default:
        process.stdout.write(
          JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } }) + "\n",
        );
    }
  }
});
