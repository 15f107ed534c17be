// Builds what pyrun embeds from the pinned packages of this folder
// (scripts/vendor-apps runs it after npm ci):
//
//	node build.mjs             ../result.html: page.html with app.js and the
//	                           ext-apps App it imports inlined, one file
//	node build.mjs page FILE   the same page, written to FILE
//	node build.mjs host FILE   FILE: host.js, the ext-apps AppBridge and the
//	                           MCP client, for the browser test's host page
import { build } from "esbuild";
import { readFile, writeFile } from "node:fs/promises";

const here = new URL(".", import.meta.url);

async function bundle(entry, format) {
  const out = await build({
    entryPoints: [new URL(entry, here).pathname],
    bundle: true,
    format,
    minify: true,
    legalComments: "eof",
    target: "es2022",
    platform: "browser",
    write: false,
    logLevel: "warning",
  });
  return out.outputFiles[0].text;
}

// licence is the ext-apps package's licence, for the page that carries
// its code (and that of the dependencies its app-with-deps build bundles).
async function licence() {
  const dir = new URL("node_modules/@modelcontextprotocol/ext-apps/", here);
  const { version } = JSON.parse(await readFile(new URL("package.json", dir), "utf8"));
  const text = (await readFile(new URL("LICENSE", dir), "utf8")).replaceAll("*/", "* /");
  return `/*! @modelcontextprotocol/ext-apps ${version}, with the dependencies it bundles:\n\n${text.trim()}\n*/\n`;
}

if (process.argv[2] === "host") {
  await writeFile(process.argv[3], await bundle("host.js", "esm"));
} else {
  const js = (await licence()) + await bundle("app.js", "iife");
  const page = await readFile(new URL("page.html", here), "utf8");
  // A "</script" inside the code would end the inline script early.
  const inline = "<script>" + js.replaceAll("</script", "<\\/script") + "</script>";
  if (!page.includes("<!-- app -->")) throw new Error("page.html has no <!-- app --> mark");
  const to = process.argv[2] === "page" ? process.argv[3] : new URL("../result.html", here);
  await writeFile(to, page.replace("<!-- app -->", () => inline));
}
