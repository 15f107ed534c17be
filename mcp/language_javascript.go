package mcp

import "fmt"

// DescribeJavaScript tells a model what run_javascript_code runs and, above
// all, the pyrun object it has instead of a file system: without it a model
// would reach for Deno.readTextFile or node:fs and be refused.
func DescribeJavaScript(l Language, o Options) string {
	in := ""
	if v := l.Versions["deno"]; v != "" {
		in = " in Deno " + v
	}
	files := "no files"
	if len(o.Mounts) > 0 {
		files = "no files but the mounted folders below"
	}
	return fmt.Sprintf(`Run JavaScript or TypeScript code and return its output and the value of its last expression.

The code runs%s as a module (top-level await works; TypeScript types are stripped, not checked) in a sandbox with no permissions: %s, network, environment or processes; only node: built-in modules can be imported (no npm:, jsr: or URL imports).
console.log/info/debug go to stdout and console.warn/error to stderr, up to %s each. The value of the last expression statement is returned as JSON (Map as an object, Set as an array, BigInt as a number, functions as their text); an uncaught error or unhandled rejection returns its stack.
The call is stopped after %s (timeout_seconds may set a shorter limit).
%sThere is no file system of its own; a global pyrun object carries files: pyrun.readTextFile(path) / pyrun.readFile(path) (a Uint8Array) read the files given in the "files" argument by their relative path; pyrun.writeFile("/output/name.ext", data) (a string or Uint8Array) returns a file as a resource; pyrun.display(data, mimeType) shows content such as an SVG ("image/svg+xml") or HTML; pyrun.files() lists them.%s`,
		in, files, humanBytes(o.MaxOutput), o.Timeout, languageSessionsDescription(l, o.Sessions), javascriptMountText(o.Mounts))
}

// javascriptMountText tells a model where the mounted folders are and how
// the pyrun object reaches them, since the code has no open() of its own.
func javascriptMountText(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	return mountText(paths) + ` pyrun.readFile(path) and pyrun.readTextFile(path) read their files by absolute path, pyrun.readDir(path) lists a folder's names (a folder's ending in "/"), and pyrun.writeFile(path, data) writes into a writable one.`
}
