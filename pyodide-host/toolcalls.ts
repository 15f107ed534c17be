// Host calls of a running call (code mode): Python's mcp_tools module calls
// toolCall, which writes a tool_call event and resolves with the
// supervisor's tool_result line (docs/protocol.md, Tool calls).

import type { Event } from "./protocol.ts";

/** The answer Python receives: the tool_result line as the supervisor wrote it, or a local failure. */
type Settle = (line: string) => void;

/** A run's host calls: call is what Python calls; idle resolves once every call has its answer. */
export interface ToolChannel {
  call(server: string, tool: string, args: string): Promise<string>;
  idle(): Promise<void>;
}

/**
 * Returns the channel Python makes host calls through. Answers come on
 * stdin while the call runs, so the channel reads lines itself, and only
 * while answers are outstanding: the supervisor answers every tool_call
 * exactly once, before its next request. The request loop must await idle
 * before it reads again, or the two readers would take each other's lines.
 */
export function toolChannel(
  lines: AsyncGenerator<string | null>,
  current: () => string,
  write: (ev: Event) => void,
): ToolChannel {
  const pending = new Map<string, Settle>();
  let seq = 0;
  let reading: Promise<void> | null = null;

  const failAll = (why: string) => {
    for (const settle of pending.values()) settle(JSON.stringify({ error: why }));
    pending.clear();
  };

  const read = async () => {
    try {
      while (pending.size) {
        const next = await lines.next();
        if (next.done) {
          failAll("pyrun: stdin ended while a tool call was waiting for its answer");
          return;
        }
        let ans: { type?: unknown; call?: unknown } | null = null;
        try {
          ans = next.value === null ? null : JSON.parse(next.value);
        } catch {
          ans = null;
        }
        const settle = typeof ans?.call === "string" ? pending.get(ans.call) : undefined;
        if (ans?.type !== "tool_result" || !settle) {
          write({
            type: "error",
            error: "bad request: expected the answer to a pending tool call",
          });
          continue;
        }
        pending.delete(ans.call as string);
        settle(next.value as string);
      }
    } finally {
      reading = null;
    }
  };

  const call = (server: string, tool: string, args: string): Promise<string> => {
    const id = current();
    if (!id) {
      return Promise.resolve(
        JSON.stringify({ error: "pyrun: a tool call outside a running call" }),
      );
    }
    const call = `t${++seq}`;
    const answer = new Promise<string>((resolve) => pending.set(call, resolve));
    write({
      type: "tool_call",
      id,
      call,
      server: String(server),
      tool: String(tool),
      args: String(args),
    });
    reading ??= read();
    return answer;
  };
  return {
    call,
    idle: async () => {
      await reading;
    },
  };
}
