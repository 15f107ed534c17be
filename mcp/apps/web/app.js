// The view of ui://pyrun/result.html: one run tool's call as the host hands
// it over (ui/notifications/tool-input, then tool-result), drawn as a cell
// of a notebook: the code, stdout and stderr, the value or the error, the
// displays (images, SVG, HTML in sandboxed frames, tables sortable) and the
// /output/ files to download. A cell's "Run again" button calls the tool
// through the host (tools/call), in the cell's session when it has one, and
// the new result becomes the next cell, so a session's cells stay in the
// order they ran. The result of a session's call carries the session's
// earlier cells (their code and status) in _meta["pyrun/cells"]: they come
// first, each with its own "Run again".
//
// Everything the call returned is untrusted: text goes in with textContent,
// images only as data: URIs of raster types or SVG (in <img>, where SVG
// runs no script), and HTML only inside an <iframe sandbox="allow-scripts">
// without allow-same-origin, which gives it an opaque origin of its own:
// it can reach neither this page nor the host.

import {
  App,
  applyDocumentTheme,
  applyHostFonts,
  applyHostStyleVariables,
} from "@modelcontextprotocol/ext-apps/app-with-deps";

// A run tool is run_<language>_code, its code in <language>_code.
const CODE_ARG = /^[a-z]+_code$/;
const RASTER = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

const app = new App({ name: "pyrun-result", version: "1.0.0" }, {});
const cells = document.getElementById("cells");
let toolName = null; // the host's toolInfo names it; else from the code's argument
let pending = null; // the cell waiting for its result
let count = 0;

app.ontoolinput = (params) => {
  pending = newCell(params.arguments ?? {});
  pending.fromHost = true;
};

app.ontoolresult = (result) => {
  const cell = pending ?? newCell({});
  pending = null;
  fill(cell, result);
};

app.ontoolcancelled = (params) => {
  if (pending) {
    pending.status.textContent = "cancelled" + (params?.reason ? ": " + params.reason : "");
    pending.status.className = "status error";
    pending = null;
  }
};

app.onhostcontextchanged = (ctx) => applyContext(ctx);

// newCell adds a cell for a call with args, its result yet to come.
function newCell(args) {
  count++;
  const el = document.createElement("section");
  el.className = "cell";
  el.dataset.n = String(count);
  const head = div("head");
  const label = span("label", "[" + count + "]");
  const status = span("status", "running");
  const rerun = document.createElement("button");
  rerun.className = "rerun";
  rerun.type = "button";
  rerun.textContent = "Run again";
  rerun.disabled = true;
  head.append(label, status, rerun);
  const codeArg = Object.keys(args).find((k) => CODE_ARG.test(k) && typeof args[k] === "string") ?? "python_code";
  const code = pre("code", args[codeArg] ?? "");
  const out = div("out");
  el.append(head, code, out);
  cells.append(el);
  const cell = { el, label, status, rerun, out, args, codeArg, session: args.session_id };
  rerun.addEventListener("click", () => runAgain(toolName ?? "run_" + cell.codeArg, cell.codeArg, cell.args[cell.codeArg], cell.session));
  return cell;
}

// runAgain calls tool again with code, in session when there is one,
// through the host; the result is a new cell at the end.
async function runAgain(tool, codeArg, code, session) {
  const args = { [codeArg]: code ?? "" };
  if (session && session !== "new") args.session_id = session;
  const next = newCell(args);
  try {
    fill(next, await app.callServerTool({ name: tool, arguments: args }));
  } catch (err) {
    next.status.textContent = "error";
    next.status.className = "status error";
    next.out.append(pre("stderr", String(err?.message ?? err)));
  }
}

// pastCell is an earlier cell of session, as its call's result listed it:
// its code and status, and its own "Run again".
function pastCell(c, session) {
  const el = document.createElement("section");
  el.className = "cell past";
  const head = div("head");
  const ok = c.status === "success";
  const rerun = document.createElement("button");
  rerun.className = "rerun";
  rerun.type = "button";
  rerun.textContent = "Run again";
  const codeArg = String(c.tool ?? "run_python_code").replace(/^run_/, "");
  rerun.addEventListener("click", () => runAgain(c.tool, codeArg, c.code, session));
  head.append(span("label", "[" + c.n + "]"), span("status " + (ok ? "ok" : "error"), c.status ?? ""), rerun);
  el.append(head, pre("code", c.code ?? ""));
  return el;
}

// fill draws a call's result into cell.
function fill(cell, result) {
  const sc = result.structuredContent ?? {};
  const ok = !result.isError;
  const past = result._meta?.["pyrun/cells"];
  if (typeof past?.n === "number") cell.label.textContent = "[" + past.n + "]";
  if (cell.fromHost && Array.isArray(past?.earlier)) {
    for (const c of past.earlier) cells.insertBefore(pastCell(c, past.session_id), cell.el);
  }
  cell.status.textContent = sc.status ?? (ok ? "success" : "error");
  cell.status.className = "status " + (ok ? "ok" : "error");
  if (sc.session_id) {
    cell.session = sc.session_id;
    cell.el.dataset.session = sc.session_id;
  }
  cell.rerun.disabled = typeof cell.args[cell.codeArg] !== "string";
  if (sc.stdout) cell.out.append(pre("stdout", sc.stdout));
  if (sc.stderr) cell.out.append(pre("stderr", sc.stderr));
  if (sc.error) {
    cell.out.append(pre("error", sc.error));
  } else if (sc.return_value !== undefined && sc.return_value !== null) {
    cell.out.append(pre("value", JSON.stringify(sc.return_value, null, 2)));
  }
  const content = result.content ?? [];
  // The first text block is the XML text for models; without
  // structuredContent (a tool error) it is all there is.
  content.forEach((block, i) => {
    if (block.type === "text") {
      if (i > 0 || result.structuredContent === undefined) cell.out.append(pre("text", block.text));
    } else if (block.type === "image" && RASTER.has(block.mimeType)) {
      cell.out.append(image(block.mimeType, block.data));
    } else if (block.type === "resource" && block.resource) {
      cell.out.append(display(block.resource));
    }
  });
  const links = content.filter((b) => b.type === "resource_link");
  if (links.length > 0) cell.out.append(files(links));
}

// display draws an embedded resource of a display.
function display(res) {
  const mime = res.mimeType ?? "";
  const text = typeof res.text === "string" ? res.text : null;
  if (mime === "image/svg+xml" && text !== null) {
    return image(mime, base64(text));
  }
  if (mime === "text/html" && text !== null) {
    return table(text) ?? frame(text);
  }
  if (text !== null) return pre("display", text);
  if (RASTER.has(mime) && res.blob) return image(mime, res.blob);
  return span("display", mime + " (binary)");
}

// table makes a sortable table of html when html is only a table (a
// DataFrame's _repr_html_: a <style>, a <table>, a note on its size), built
// from the cells' text; else null.
function table(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  const tables = doc.querySelectorAll("table");
  if (tables.length !== 1 || doc.querySelector("script, iframe, img, svg, object, embed, form, table table")) {
    return null;
  }
  const src = tables[0];
  const wrap = div("table");
  const t = document.createElement("table");
  const rows = [...src.rows];
  const headRows = src.tHead ? [...src.tHead.rows] : rows.slice(0, 1);
  const bodyRows = rows.filter((r) => !headRows.includes(r));
  const thead = t.createTHead();
  for (const r of headRows) {
    const tr = thead.insertRow();
    [...r.cells].forEach((c, col) => {
      const th = document.createElement("th");
      th.textContent = c.textContent.trim();
      th.colSpan = c.colSpan;
      if (r === headRows[headRows.length - 1]) {
        th.className = "sortable";
        th.title = "sort";
        th.addEventListener("click", () => sortBy(t, col, th));
      }
      tr.append(th);
    });
  }
  const tbody = t.createTBody();
  for (const r of bodyRows) {
    const tr = tbody.insertRow();
    for (const c of r.cells) {
      const td = document.createElement(c.tagName === "TH" ? "th" : "td");
      td.textContent = c.textContent.trim();
      tr.append(td);
    }
  }
  wrap.append(t);
  for (const p of doc.querySelectorAll("p")) wrap.append(span("note", p.textContent.trim()));
  return wrap;
}

// sortBy sorts t's body rows by column col, as numbers when all are,
// flipping the order on each click.
function sortBy(t, col, th) {
  const desc = th.dataset.sort === "asc";
  for (const other of t.tHead.querySelectorAll("th")) delete other.dataset.sort;
  th.dataset.sort = desc ? "desc" : "asc";
  const body = t.tBodies[0];
  const rows = [...body.rows];
  const key = (r) => r.cells[col]?.textContent ?? "";
  const numeric = rows.every((r) => key(r) !== "" && !isNaN(Number(key(r))));
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const c = numeric ? Number(x) - Number(y) : x.localeCompare(y);
    return desc ? -c : c;
  });
  body.append(...rows);
}

// frame shows html in a sandboxed frame: scripts may run (a Plotly chart's
// do), but with an opaque origin, no top navigation, no popups.
function frame(html) {
  const f = document.createElement("iframe");
  f.className = "html";
  f.setAttribute("sandbox", "allow-scripts");
  f.setAttribute("referrerpolicy", "no-referrer");
  f.srcdoc = html;
  return f;
}

// files lists the call's /output/ files. A click asks the host to
// download one (ui/download-file; the host reads it from pyrun with
// resources/read); a host that cannot download has the view read it
// (resources/read through the host) and show it under its link: text as
// text, a raster image as an image.
function files(links) {
  const ul = document.createElement("ul");
  ul.className = "files";
  for (const l of links) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.className = "file";
    a.href = "#";
    a.textContent = l.name ?? l.uri;
    a.dataset.uri = l.uri;
    a.addEventListener("click", async (ev) => {
      ev.preventDefault();
      try {
        if (app.getHostCapabilities()?.downloadFile) {
          await app.downloadFile({
            contents: [{ type: "resource_link", uri: l.uri, name: l.name ?? l.uri, mimeType: l.mimeType }],
          });
          return;
        }
        const r = await app.readServerResource({ uri: l.uri });
        const c = r.contents?.[0];
        li.querySelector(".file-view")?.remove();
        let view;
        if (typeof c?.text === "string") {
          view = pre("file-view", c.text);
        } else if (c?.blob && RASTER.has(c.mimeType)) {
          view = image(c.mimeType, c.blob);
          view.classList.add("file-view");
        } else {
          view = span("file-view note", "binary: " + sizeText(l.size));
        }
        li.append(view);
      } catch (err) {
        a.title = "could not get the file: " + String(err?.message ?? err);
      }
    });
    li.append(a, span("size", sizeText(l.size) + (l.mimeType ? ", " + l.mimeType : "")));
    ul.append(li);
  }
  return ul;
}

function image(mime, data) {
  const img = document.createElement("img");
  img.className = "display";
  img.alt = mime;
  img.src = "data:" + mime + ";base64," + data;
  return img;
}

function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function sizeText(n) {
  if (typeof n !== "number") return "";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

function div(cls) {
  const d = document.createElement("div");
  d.className = cls;
  return d;
}

function span(cls, text) {
  const s = document.createElement("span");
  s.className = cls;
  s.textContent = text;
  return s;
}

function pre(cls, text) {
  const p = document.createElement("pre");
  p.className = cls;
  p.textContent = text;
  return p;
}

function applyContext(ctx) {
  if (!ctx) return;
  if (ctx.toolInfo?.tool?.name) toolName = ctx.toolInfo.tool.name;
  // The host's look: its theme, colours and fonts (page.html falls back
  // on its own for what a host leaves out).
  if (ctx.theme) applyDocumentTheme(ctx.theme);
  if (ctx.styles?.variables) applyHostStyleVariables(ctx.styles.variables);
  if (ctx.styles?.css?.fonts) applyHostFonts(ctx.styles.css.fonts);
}

app.connect().then(() => {
  applyContext(app.getHostContext());
  document.body.dataset.ready = "true";
});
