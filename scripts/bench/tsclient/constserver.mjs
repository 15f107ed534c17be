// The client's floor for scripts/bench's tsclient tier: a stdio MCP server
// of the TypeScript SDK (its low-level Server) that lists the tools given
// as argv[2] and answers every tools/call at once with the result given as
// argv[3] (pyrun's own, for the same call), so that a client timing calls
// to it times the client, the SDK's JSON-RPC on both ends and the pipes:
// what a call costs before any server does any work.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const tools = JSON.parse(process.argv[2]);
const result = JSON.parse(process.argv[3]);
const server = new Server({ name: "pyrun-bench-constserver", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, () => result);
await server.connect(new StdioServerTransport());
