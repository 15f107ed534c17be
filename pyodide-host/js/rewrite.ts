// Rewrites a call's code before it runs as a module in the user Worker
// (docs/protocol.md, Engines: JavaScript). TypeScript's parser finds the syntax
// errors and the statements to change; the code stays TypeScript, since Deno
// strips the types when it loads the module. Every edit keeps the code's line
// breaks, so that Deno's positions in stack traces stay the user's lines.

import type * as TS from "../node_modules/typescript/lib/typescript.d.ts";

/** The export that carries the value of the code's last expression statement. */
export const VALUE_EXPORT = "__pyrun_value__";

export type Rewritten =
  | { code: string; error?: undefined; position: PositionMap }
  | { code?: undefined; error: string };

/** Maps a 1-based line and column of the rewritten code to the user's. */
export type PositionMap = (line: number, column: number) => [number, number];

interface Edit {
  pos: number;
  end: number;
  text: string;
}

/**
 * Rewrites code: its last statement, when an expression statement, becomes
 * `export const __pyrun_value__ = (expr)`. In a session (keep), the
 * top-level declarations are rewritten onto globalThis, so that the next
 * call, another module, sees them:
 *
 *  - `let`/`const`/`var` become assignments to globalThis properties
 *    (destructuring too), so that functions of any call read the same live
 *    binding; a `const` so becomes writable;
 *  - `function`, `class` and `enum` declarations stay, so that functions keep
 *    their hoisting, and are copied to globalThis right after the declaration;
 *  - imported names are copied to globalThis after the import.
 *
 * `using` declarations, namespaces, `const enum`s and `declare`d names stay
 * the call's own. A syntax error is returned as its message with position.
 */
export function rewrite(ts: typeof TS, code: string, keep: boolean): Rewritten {
  let sf: TS.SourceFile;
  try {
    sf = ts.createSourceFile("main.ts", code, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  } catch (e) {
    // TypeScript's parser recurses once or more per level of nesting: past
    // some hundreds of levels (760 parentheses) it runs out of stack.
    if (e instanceof RangeError) return { error: TOO_DEEP };
    throw e;
  }
  // The parser's own diagnostics: syntax only, no type checking.
  const diags = (sf as unknown as { parseDiagnostics: TS.DiagnosticWithLocation[] })
    .parseDiagnostics;
  if (diags.length) return { error: syntaxError(ts, sf, diags[0]) };
  if (nesting(ts, sf) > MAX_NESTING) return { error: TOO_DEEP };
  const edits: Edit[] = [];
  if (keep) { for (const s of sf.statements) publish(ts, sf, s, edits); }
  const last = sf.statements[sf.statements.length - 1];
  if (last && ts.isExpressionStatement(last)) {
    const start = last.expression.getStart(sf);
    // The leading ; ends a previous statement written without one.
    edits.push({ pos: start, end: start, text: `;export const ${VALUE_EXPORT} = (` });
    edits.push({ pos: last.expression.end, end: last.expression.end, text: ")" });
  }
  return apply(code, edits);
}

/**
 * The deepest syntax tree a call's code may have. Deno parses every module
 * it loads (JavaScript too) with swc, on a thread whose stack ends the whole
 * process when it overflows ("fatal runtime error: stack overflow"): with
 * Deno 2.9.6, at 800 nested parentheses (804 levels of TypeScript's tree),
 * 411 `(() => ...)`, 313 `(function () { return ... })()` (1569 levels),
 * 5242 terms of `1+1+...`; no shape tried failed below 804 levels. Half of
 * that leaves room, and no code written by hand comes near it.
 */
export const MAX_NESTING = 400;

/** The depth of the syntax tree (at most MAX_NESTING + 1), walked without recursion. */
function nesting(ts: typeof TS, sf: TS.SourceFile): number {
  let max = 0;
  const nodes: TS.Node[] = [sf];
  const depths: number[] = [0];
  while (nodes.length) {
    const node = nodes.pop()!;
    const d = depths.pop()!;
    if (d > max) {
      max = d;
      // Deep enough to refuse: the rest of the tree need not be walked.
      if (max > MAX_NESTING) return max;
    }
    ts.forEachChild(node, (child) => {
      nodes.push(child);
      depths.push(d + 1);
    });
  }
  return max;
}

const TOO_DEEP = `SyntaxError: the code is nested more than ${MAX_NESTING} levels deep ` +
  "(expressions, blocks and functions inside each other); pyrun runs code nested at most " +
  `${MAX_NESTING} levels, as Deno's module loader would run out of stack`;

/** Applies the edits, and maps positions in the result back to code's. */
function apply(code: string, edits: Edit[]): { code: string; position: PositionMap } {
  // Stable sort: edits at one position keep the order they were made in.
  edits.sort((a, b) => a.pos - b.pos);
  let out = "";
  let at = 0;
  // Offsets where each piece of the result starts, in the result and in
  // code; a piece is copied (same length in both) or an edit's text.
  const outStarts: number[] = [];
  const inStarts: number[] = [];
  const copied: boolean[] = [];
  const piece = (text: string, inPos: number, copy: boolean) => {
    outStarts.push(out.length);
    inStarts.push(inPos);
    copied.push(copy);
    out += text;
  };
  for (const e of edits) {
    piece(code.slice(at, e.pos), at, true);
    piece(e.text, e.pos, false);
    at = e.end;
  }
  piece(code.slice(at), at, true);
  const outLines = lineStarts(out);
  const inLines = lineStarts(code);
  const position: PositionMap = (line, column) => {
    const off = (outLines[line - 1] ?? out.length) + column - 1;
    let i = outStarts.length - 1;
    while (i > 0 && outStarts[i] > off) i--;
    const inOff = inStarts[i] + (copied[i] ? off - outStarts[i] : 0);
    let l = inLines.length - 1;
    while (l > 0 && inLines[l] > inOff) l--;
    return [l + 1, inOff - inLines[l] + 1];
  };
  return { code: out, position };
}

function lineStarts(text: string): number[] {
  const starts = [0];
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) starts.push(i + 1);
  return starts;
}

/** Rewrites the main.ts:LINE:COLUMN positions in text from the rewritten code's to the user's. */
export function mapPositions(text: string, position: PositionMap): string {
  return text.replace(/main\.ts:(\d+):(\d+)/g, (_, l, c) => {
    const [line, column] = position(Number(l), Number(c));
    return `main.ts:${line}:${column}`;
  });
}

function hasModifier(ts: typeof TS, node: TS.Node, kind: TS.SyntaxKind): boolean {
  return !!(ts.canHaveModifiers(node) && ts.getModifiers(node)?.some((m) => m.kind === kind));
}

/** Adds the edits that put one top-level statement's names on globalThis. */
function publish(ts: typeof TS, sf: TS.SourceFile, s: TS.Statement, edits: Edit[]): void {
  if (hasModifier(ts, s, ts.SyntaxKind.DeclareKeyword)) return;
  const copy = (names: string[]) => {
    if (names.length) {
      edits.push({
        pos: s.end,
        end: s.end,
        text: names.map((n) => `;globalThis.${n} = ${n}`).join("") + ";",
      });
    }
  };
  const isDefault = hasModifier(ts, s, ts.SyntaxKind.DefaultKeyword);
  if (ts.isVariableStatement(s)) {
    assignments(ts, sf, s, edits);
  } else if (ts.isFunctionDeclaration(s) || ts.isClassDeclaration(s)) {
    // A function without a body is an overload signature: types only.
    if (s.name && !isDefault && (!ts.isFunctionDeclaration(s) || s.body)) {
      copy([s.name.getText(sf)]);
    }
  } else if (ts.isEnumDeclaration(s)) {
    if (!hasModifier(ts, s, ts.SyntaxKind.ConstKeyword)) copy([s.name.getText(sf)]);
  } else if (ts.isImportDeclaration(s)) {
    const clause = s.importClause;
    if (!clause || clause.isTypeOnly) return;
    const names: string[] = [];
    if (clause.name) names.push(clause.name.getText(sf));
    const bindings = clause.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) names.push(bindings.name.getText(sf));
    if (bindings && ts.isNamedImports(bindings)) {
      for (const el of bindings.elements) if (!el.isTypeOnly) names.push(el.name.getText(sf));
    }
    copy(names);
  }
}

/** `let a = 1, {b} = o` becomes `;(globalThis.a = 1), ({b: globalThis.b} = o)`. */
function assignments(ts: typeof TS, sf: TS.SourceFile, s: TS.VariableStatement, edits: Edit[]) {
  const list = s.declarationList;
  // using and await using must stay declarations: they dispose at the end.
  if (list.flags & ts.NodeFlags.Using) return;
  const isVar = !(list.flags & (ts.NodeFlags.Let | ts.NodeFlags.Const));
  const decls = list.declarations;
  if (!decls.length) return;
  // `export let` / `let` / `const` go; the statement becomes an expression.
  edits.push({ pos: s.getStart(sf), end: decls[0].getStart(sf), text: ";" });
  for (const d of decls) {
    const start = d.getStart(sf);
    if (!d.initializer) {
      // Only a plain name can go without an initializer.
      const n = d.name.getText(sf);
      const text = isVar
        ? `(${JSON.stringify(n)} in globalThis || (globalThis.${n} = undefined))`
        : `(globalThis.${n} = undefined)`;
      edits.push({ pos: start, end: d.end, text: text + newlines(sf.text.slice(start, d.end)) });
      continue;
    }
    edits.push({ pos: start, end: start, text: "(" });
    targets(ts, sf, d.name, edits);
    // `x!: T = 1`: the definite-assignment mark and the type go.
    const typeEnd = d.type?.end ?? d.exclamationToken?.end;
    if (typeEnd !== undefined) {
      edits.push({
        pos: d.name.end,
        end: typeEnd,
        text: newlines(sf.text.slice(d.name.end, typeEnd)),
      });
    }
    edits.push({ pos: d.end, end: d.end, text: ")" });
  }
}

/** Turns a binding name or pattern into an assignment target on globalThis. */
function targets(ts: typeof TS, sf: TS.SourceFile, name: TS.BindingName, edits: Edit[]): void {
  if (ts.isIdentifier(name)) {
    const n = name.getText(sf);
    edits.push({ pos: name.getStart(sf), end: name.end, text: `globalThis.${n}` });
    return;
  }
  for (const el of name.elements) {
    if (ts.isOmittedExpression(el)) continue;
    if (ts.isObjectBindingPattern(name) && !el.propertyName && !el.dotDotDotToken) {
      // The shorthand `{a}` needs its property name: `{a: globalThis.a}`.
      const n = el.name.getText(sf);
      edits.push({ pos: el.name.getStart(sf), end: el.name.end, text: `${n}: globalThis.${n}` });
      continue;
    }
    targets(ts, sf, el.name, edits);
  }
}

/** The line breaks of text, so that an edit that drops it keeps the lines. */
function newlines(text: string): string {
  return text.replace(/[^\n]/g, "");
}

/** A syntax error as the user reads it: message, the line, a caret, the position. */
function syntaxError(ts: typeof TS, sf: TS.SourceFile, d: TS.DiagnosticWithLocation): string {
  const { line, character } = sf.getLineAndCharacterOfPosition(d.start);
  const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
  const lineText = sf.text.split(/\r?\n/)[line] ?? "";
  const caret = lineText.slice(0, character).replace(/[^\t]/g, " ") + "^";
  return `SyntaxError: ${text}\n  ${lineText}\n  ${caret}\n    at main.ts:${line + 1}:${
    character + 1
  }`;
}
