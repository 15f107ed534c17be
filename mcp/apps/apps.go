// Package apps is pyrun's MCP App (the MCP Apps extension, SEP-1865,
// io.modelcontextprotocol/ui): the view ui://pyrun/result.html, which a host
// that speaks the extension shows in place of a run tool's result: the
// code, its output, images, HTML displays in sandboxed frames, tables
// sortable, /output/ files to download, and a button that runs a cell again
// through the host (docs/rich-results.md).
//
// Only a client that declared the extension sees any of it: Middleware adds
// `_meta.ui.resourceUri` to the run tools in its tools/list and the resource
// to its resources/list; every other client gets both lists as they were.
// The view draws the result the host hands it, so results stay what they
// are, but for one addition: the result of a session's call gives such a
// client the session's earlier cells in _meta (CellsMetaKey), which Cells
// keeps, bounded in bytes.
//
//	srv.AddResource(apps.Resource(), apps.Read)
//	srv.AddReceivingMiddleware(apps.Middleware(isRunTool))
//	cells := apps.NewCells(apps.DefaultCellBytes)
//	earlier, n := cells.Add(sessionID, apps.Cell{Tool: ..., Code: ..., Status: ...})
//
// The page is one file, result.html, built by scripts/vendor-apps from
// web/: app.js with the App class of the official
// @modelcontextprotocol/ext-apps package (its version pinned in
// web/package.json and package-lock.json) inlined, so nothing is fetched
// when a host shows it.
package apps

//go:generate ../../scripts/vendor-apps

import (
	"context"
	_ "embed"
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The extension's names.
const (
	// ExtensionID is the key of the extension in a client's (and
	// server's) capabilities.extensions.
	ExtensionID = "io.modelcontextprotocol/ui"
	// MIMEType is an MCP App's HTML.
	MIMEType = "text/html;profile=mcp-app"
	// ResultURI is the view of a run's result.
	ResultURI = "ui://pyrun/result.html"
	// legacyMetaKey is the flat key of hosts from before `_meta.ui`; the
	// official server helper sets both.
	legacyMetaKey = "ui/resourceUri"
)

//go:embed result.html
var resultHTML string

// Resource is ui://pyrun/result.html as resources/list shows it.
func Resource() *sdk.Resource {
	return &sdk.Resource{
		URI:         ResultURI,
		Name:        "result",
		Title:       "pyrun: a run's results",
		Description: "The MCP App view of a run tool's result: output, images, HTML displays, tables, /output/ files, and a button to run a cell again",
		MIMEType:    MIMEType,
		Meta:        resourceMeta(),
	}
}

// resourceMeta asks for a border and for no network: the page carries its
// library, and displays come inside the result.
func resourceMeta() sdk.Meta {
	return sdk.Meta{"ui": map[string]any{"prefersBorder": true}}
}

// Read serves resources/read of ResultURI (the SDK routes only that URI
// here).
func Read(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	if req.Params.URI != ResultURI {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{
		URI: ResultURI, MIMEType: MIMEType, Text: resultHTML, Meta: resourceMeta(),
	}}}, nil
}

// HTML is the page, for tests.
func HTML() string { return resultHTML }

// Middleware names the view on the run tools (those isRunTool says yes to)
// in tools/list for a client that declared the extension, and keeps the
// view out of resources/list for a client that did not: other clients'
// answers are what they were before pyrun had an app.
func Middleware(isRunTool func(name string) bool) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			res, err := next(ctx, method, req)
			if err != nil {
				return res, err
			}
			switch r := res.(type) {
			case *sdk.ListToolsResult:
				if method == "tools/list" && Negotiated(req) {
					return withView(r, isRunTool), nil
				}
			case *sdk.ListResourcesResult:
				if method == "resources/list" && !Negotiated(req) {
					return withoutView(r), nil
				}
			}
			return res, err
		}
	}
}

// withoutView is r less the view.
func withoutView(r *sdk.ListResourcesResult) *sdk.ListResourcesResult {
	out := *r
	out.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(x *sdk.Resource) bool {
		return x != nil && x.URI == ResultURI
	})
	return &out
}

// withView is r with the run tools' _meta naming the view: copies, as the
// SDK's tools are shared by every client.
func withView(r *sdk.ListToolsResult, isRunTool func(string) bool) *sdk.ListToolsResult {
	out := *r
	out.Tools = slices.Clone(r.Tools)
	for i, t := range out.Tools {
		if t == nil || !isRunTool(t.Name) {
			continue
		}
		c := *t
		c.Meta = maps.Clone(t.Meta)
		if c.Meta == nil {
			c.Meta = sdk.Meta{}
		}
		c.Meta["ui"] = map[string]any{"resourceUri": ResultURI}
		c.Meta[legacyMetaKey] = ResultURI
		out.Tools[i] = &c
	}
	return &out
}

// Negotiated says whether req's client declared the extension: a
// 2026-07-28 request in its own _meta, an older session at initialize. A
// declaration that lists mimeTypes must list MIMEType.
func Negotiated(req sdk.Request) bool {
	// A request may hold a nil pointer as its params, whose GetMeta
	// would panic.
	if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
		if v, ok := p.GetMeta()[sdk.MetaKeyClientCapabilities]; ok {
			return declares(v)
		}
	}
	ss, ok := req.GetSession().(*sdk.ServerSession)
	if !ok || ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	return declares(ip.Capabilities)
}

// declares says whether caps, client capabilities in any form that
// marshals to their JSON, hold the extension.
func declares(caps any) bool {
	b, err := json.Marshal(caps)
	if err != nil {
		return false
	}
	var c struct {
		Extensions map[string]*struct {
			MIMETypes []string `json:"mimeTypes"`
		} `json:"extensions"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false
	}
	ui, ok := c.Extensions[ExtensionID]
	if !ok {
		return false
	}
	return ui == nil || ui.MIMETypes == nil || slices.Contains(ui.MIMETypes, MIMEType)
}
