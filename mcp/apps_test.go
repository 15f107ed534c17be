package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/mcp/apps"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// appsTransports are the ways a client reaches pyrun whose declared
// capabilities travel differently: at initialize (a 2025-11-25 session, in
// memory as over stdio) or in every request's _meta (2026-07-28 over
// Streamable HTTP, the stateless handler).
var appsTransports = []struct {
	name, revision string
	http           bool
}{
	{"2025-11-25 session", "2025-11-25", false},
	{"2026-07-28 over HTTP", revision20260728, true},
}

// appsClient connects a client of revision to s, declaring the MCP Apps
// extension when ext.
func appsClient(t *testing.T, s *Server, revision string, overHTTP, ext bool) *sdk.ClientSession {
	t.Helper()
	caps := &sdk.ClientCapabilities{}
	if ext {
		caps.AddExtension(apps.ExtensionID, map[string]any{"mimeTypes": []string{apps.MIMEType}})
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "apps-test", Version: "1"}, &sdk.ClientOptions{Capabilities: caps})
	var transport sdk.Transport
	if overHTTP {
		transport = &sdk.StreamableClientTransport{Endpoint: startHTTP(t, s).URL + "/mcp", MaxRetries: -1}
	} else {
		serverT, clientT := sdk.NewInMemoryTransports()
		ss, err := s.sdk.Connect(t.Context(), serverT, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ss.Close() })
		transport = clientT
	}
	cs, err := c.Connect(t.Context(), transport, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Fatalf("speaking %s, want %s", got, revision)
	}
	return cs
}

// appsResult is a run with a display and a file.
func appsResult(t *testing.T) mcptest.Func {
	return func(_ context.Context, job supervisor.Job, _ supervisor.Events) (supervisor.Result, error) {
		return supervisor.Result{ID: job.ID, Status: supervisor.StatusSuccess, Stdout: "hi\n", Value: "2",
			Displays: []supervisor.Display{{MIMEType: "text/html", Data: []byte("<table><tr><td>1</td></tr></table>")}},
			Files:    []supervisor.OutputFile{mcptest.OutputFile(t, "a.csv", "text/csv", []byte("n\n1\n"))},
		}, nil
	}
}

// listJSON is the JSON of tools/list's tools and resources/list's
// resources, as cs is given them.
func listJSON(t *testing.T, cs *sdk.ClientSession) (tools []map[string]any, resources string) {
	t.Helper()
	tl, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tl.Tools)
	if err := json.Unmarshal(b, &tools); err != nil {
		t.Fatal(err)
	}
	rl, err := cs.ListResources(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := json.Marshal(rl.Resources)
	return tools, string(rb)
}

// A client that declares MCP Apps finds the view named in the run tools'
// _meta (the official key and the legacy flat one), listed in
// resources/list, and readable; a client that does not gets exactly the
// tool list it got before (the same tools, no _meta) and an empty
// resources/list; both get the same call result. On both ways
// capabilities travel.
func TestAppsOnlyForClientsOfTheExtension(t *testing.T) {
	for _, tr := range appsTransports {
		t.Run(tr.name, func(t *testing.T) {
			s := New(appsResult(t), Options{Version: "test"}, testLogger(t))
			plain := appsClient(t, s, tr.revision, tr.http, false)
			ui := appsClient(t, s, tr.revision, tr.http, true)

			plainTools, plainRes := listJSON(t, plain)
			uiTools, uiRes := listJSON(t, ui)
			if plainRes != "[]" {
				t.Errorf("resources/list of a client without the extension: %s, want []", plainRes)
			}
			if !strings.Contains(uiRes, apps.ResultURI) || !strings.Contains(uiRes, apps.MIMEType) {
				t.Errorf("resources/list of a client of the extension: %s, want %s (%s)", uiRes, apps.ResultURI, apps.MIMEType)
			}
			// What the tool list was before pyrun had an app: the tools as
			// they are defined, with no _meta.
			var want []map[string]any
			for _, l := range s.options().languages() {
				b, _ := json.Marshal(languageToolDef(l, s.options()))
				var m map[string]any
				_ = json.Unmarshal(b, &m)
				want = append(want, m)
			}
			if !reflect.DeepEqual(plainTools, want) {
				t.Errorf("tools/list without the extension changed:\n%v\nwant\n%v", plainTools, want)
			}
			if len(uiTools) != len(want) {
				t.Fatalf("tools/list of a client of the extension: %d tools, want %d", len(uiTools), len(want))
			}
			for i, tool := range uiTools {
				meta, _ := tool["_meta"].(map[string]any)
				view, _ := meta["ui"].(map[string]any)
				if view["resourceUri"] != apps.ResultURI || meta["ui/resourceUri"] != apps.ResultURI {
					t.Errorf("tool %v: _meta %v, want ui.resourceUri and ui/resourceUri %s", tool["name"], meta, apps.ResultURI)
				}
				delete(tool, "_meta")
				if !reflect.DeepEqual(tool, want[i]) {
					t.Errorf("tool %v differs beyond its _meta:\n%v\nwant\n%v", tool["name"], tool, want[i])
				}
			}

			rr, err := ui.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: apps.ResultURI})
			if err != nil {
				t.Fatal(err)
			}
			if len(rr.Contents) != 1 || rr.Contents[0].MIMEType != apps.MIMEType || rr.Contents[0].Text != apps.HTML() {
				t.Errorf("resources/read %s: %d contents, want the page as %s", apps.ResultURI, len(rr.Contents), apps.MIMEType)
			}

			call := func(cs *sdk.ClientSession) string {
				r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: map[string]any{"python_code": "1+1"}})
				if err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(r)
				return tokenURI.ReplaceAllString(string(b), "pyrun://$1/TOKEN/")
			}
			if a, b := call(plain), call(ui); a != b {
				t.Errorf("results differ:\nwithout the extension %s\nwith it %s", a, b)
			}
		})
	}
}

// A declaration whose mimeTypes leave out MCP Apps' HTML is not taken as
// the extension; one without mimeTypes is.
func TestAppsDeclaration(t *testing.T) {
	for _, c := range []struct {
		settings map[string]any
		want     bool
	}{
		{map[string]any{"mimeTypes": []string{apps.MIMEType}}, true},
		{map[string]any{}, true},
		{map[string]any{"mimeTypes": []string{"text/html"}}, false},
	} {
		s := New(appsResult(t), Options{Version: "test"}, testLogger(t))
		caps := &sdk.ClientCapabilities{}
		caps.AddExtension(apps.ExtensionID, c.settings)
		serverT, clientT := sdk.NewInMemoryTransports()
		ss, err := s.sdk.Connect(t.Context(), serverT, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ClientOptions{Capabilities: caps}).Connect(t.Context(), clientT, nil)
		if err != nil {
			t.Fatal(err)
		}
		tools, _ := listJSON(t, cs)
		_, got := tools[0]["_meta"]
		if got != c.want {
			t.Errorf("declared %v: view named %v, want %v", c.settings, got, c.want)
		}
		_ = cs.Close()
		_ = ss.Close()
	}
}

// fakeSessions runs session calls as a stand-in: "new" becomes "s-1".
type fakeSessions struct{}

func (fakeSessions) Run(_ context.Context, c sessions.Call, _ supervisor.Events) (supervisor.Result, error) {
	id := c.Session
	if id == "new" {
		id = "s-1"
	}
	return supervisor.Result{ID: c.Job.ID, Status: supervisor.StatusSuccess, SessionID: id}, nil
}

// The result of a session's call carries, for a client of MCP Apps only,
// the session's earlier cells in _meta (apps.CellsMetaKey) for the view,
// in order and numbered; a call that ends the session drops them; a
// client without the extension gets no _meta and leaves nothing kept.
func TestAppsSessionCells(t *testing.T) {
	s := New(appsResult(t), Options{Version: "test"}, testLogger(t))
	s.UseSessions(fakeSessions{})
	ui := appsClient(t, s, "2025-11-25", false, true)
	plain := appsClient(t, s, "2025-11-25", false, false)
	type cellsMeta struct {
		SessionID string      `json:"session_id"`
		N         int         `json:"n"`
		Earlier   []apps.Cell `json:"earlier"`
	}
	call := func(cs *sdk.ClientSession, code, session string, end bool) (map[string]any, cellsMeta) {
		t.Helper()
		args := map[string]any{"python_code": code}
		if session != "" {
			args["session_id"] = session
		}
		if end {
			args["end_session"] = true
		}
		r, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: ToolName, Arguments: args})
		if err != nil || r.IsError {
			t.Fatalf("call %q: %v %v", code, err, r)
		}
		var m cellsMeta
		if v, ok := r.Meta[apps.CellsMetaKey]; ok {
			b, _ := json.Marshal(v)
			_ = json.Unmarshal(b, &m)
		}
		return r.Meta, m
	}
	if meta, _ := call(plain, "p = 1", "new", false); meta != nil {
		t.Errorf("a client without the extension got _meta %v", meta)
	}
	if s.cells.Bytes() != 0 {
		t.Errorf("%d bytes kept for a client without the extension", s.cells.Bytes())
	}
	_, m := call(ui, "a = 1", "new", false)
	if m.SessionID != "s-1" || m.N != 1 || len(m.Earlier) != 0 {
		t.Errorf("first call: %+v, want session s-1, cell 1, none earlier", m)
	}
	call(ui, "b = 2", "s-1", false)
	_, m = call(ui, "a + b", "s-1", false)
	if m.N != 3 || len(m.Earlier) != 2 || m.Earlier[0].Code != "a = 1" || m.Earlier[1].Code != "b = 2" ||
		m.Earlier[1].N != 2 || m.Earlier[0].Tool != ToolName || m.Earlier[0].Status != "success" {
		t.Errorf("third call: %+v, want cells 1 and 2 before it, as run", m)
	}
	call(ui, "", "s-1", true)
	if s.cells.Bytes() != 0 {
		t.Errorf("%d bytes still kept after the session ended", s.cells.Bytes())
	}
	if meta, _ := call(ui, "1", "", false); meta != nil {
		t.Errorf("a stateless call got _meta %v", meta)
	}
}

// Over stdio, where pyrun's line filter rewrites 2025-11-25's tools/list
// for tasks, a client of MCP Apps still finds the view on the run tools,
// beside execution.taskSupport; a client without it finds no _meta.
func TestAppsOverStdio(t *testing.T) {
	for _, ext := range []bool{false, true} {
		s := New(appsResult(t), Options{Version: "test"}, testLogger(t))
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = s.runIO(ctx, inR, outW)
			_ = outW.Close()
		}()
		p := &stdioPeer{in: inW, out: bufio.NewReaderSize(outR, 1<<20)}
		caps := `{}`
		if ext {
			caps = `{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html;profile=mcp-app"]}}}`
		}
		p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"t","version":"1"}}}`)
		p.recv(t)
		p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		p.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		m := p.recv(t)
		res, _ := m["result"].(map[string]any)
		tools, _ := res["tools"].([]any)
		if len(tools) != 1 {
			t.Fatalf("tools/list: %v", m)
		}
		tool := tools[0].(map[string]any)
		meta, hasMeta := tool["_meta"].(map[string]any)
		view, _ := meta["ui"].(map[string]any)
		if hasMeta != ext || ext && view["resourceUri"] != apps.ResultURI {
			t.Errorf("declared %v: _meta %v, want the view only when declared", ext, tool["_meta"])
		}
		if tool["execution"] == nil {
			t.Errorf("declared %v: no execution.taskSupport: %v", ext, tool)
		}
		cancel()
		_ = inW.Close()
		_, _ = io.Copy(io.Discard, outR)
		<-done
	}
}
