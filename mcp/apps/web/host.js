// The browser test's host (mcp/apps browser_test.go): what a chat host
// does with pyrun's app, with the official host side of
// @modelcontextprotocol/ext-apps. It connects an MCP client, declaring the
// extension, to the page's own origin's /mcp (the test proxies it to
// pyrun), finds the view named in the run tool's _meta, reads it, calls the
// tool twice in a new session, and shows, for the second call, the view in a sandboxed frame with an AppBridge that
// hands it the call's input and result and forwards what the view asks of
// the server (tools/call, resources/read). window.hostState tells the test
// how far it got.
import {
  AppBridge,
  getToolUiResourceUri,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
} from "@modelcontextprotocol/ext-apps/app-bridge";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const state = (window.hostState = { step: "start", downloads: [], errors: [] });

// The CSP the spec has a host put on a view that declares no domains
// (McpUiResourceCsp): no network, no nested frames (frame-src 'none': a
// srcdoc frame, which loads nothing, is still allowed), inline script and
// style, data: images.
const CSP =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; frame-src 'none'; connect-src 'none'; base-uri 'self'";

async function main() {
  const params = new URLSearchParams(location.search);
  const client = new Client(
    { name: "pyrun-apps-test-host", version: "1.0.0" },
    { capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [RESOURCE_MIME_TYPE] } } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", location.href)));
  state.step = "connected";
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === "run_python_code");
  const uri = getToolUiResourceUri(tool);
  state.resourceUri = uri;
  const read = await client.readResource({ uri });
  const page = read.contents[0];
  state.mimeType = page.mimeType;
  // A first call starts the session; the view is shown for the second.
  const setup = await client.callTool({
    name: tool.name,
    arguments: { python_code: params.get("setup"), session_id: "new" },
  });
  const args = { python_code: params.get("code"), session_id: setup.structuredContent.session_id };
  const result = await client.callTool({ name: tool.name, arguments: args });
  state.sessionId = result.structuredContent?.session_id;
  state.step = "called";

  const frame = document.createElement("iframe");
  frame.id = "app";
  frame.setAttribute("sandbox", "allow-scripts");
  frame.style.cssText = "width: 900px; height: 1400px; border: 1px solid #999";
  document.body.append(frame);
  const bridge = new AppBridge(
    client,
    { name: "pyrun-apps-test-host", version: "1.0.0" },
    // ?nodownload: a host without ui/download-file.
    {
      openLinks: {},
      serverTools: {},
      serverResources: {},
      logging: {},
      ...(params.has("nodownload") ? {} : { downloadFile: {} }),
    },
    {
      hostContext: {
        toolInfo: { tool },
        theme: "light",
        displayMode: "inline",
        styles: { variables: { "--color-text-success": "rgb(0, 0, 255)" } },
      },
    },
  );
  bridge.oninitialized = async () => {
    state.step = "initialized";
    await bridge.sendToolInput({ arguments: args });
    await bridge.sendToolResult(result);
    state.step = "sent";
  };
  // The view says how tall it is, as hosts size their frames.
  bridge.onsizechange = ({ height }) => {
    if (height) frame.style.height = Math.ceil(height) + 20 + "px";
  };
  // A download: the host fetches the linked resource from the server.
  if (!params.has("nodownload")) bridge.ondownloadfile = async ({ contents }) => {
    for (const c of contents) {
      const r = await client.readResource({ uri: c.uri });
      state.downloads.push({ uri: c.uri, name: c.name, text: r.contents[0].text ?? null });
    }
    return {};
  };
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  frame.srcdoc = page.text.replace("<head>", `<head><meta http-equiv="Content-Security-Policy" content="${CSP}">`);
}

main().catch((err) => {
  state.errors.push(String(err?.stack ?? err));
  state.step = "failed";
});
