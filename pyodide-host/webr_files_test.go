package pyodidehost_test

// Input files and the files a call leaves under /output/.

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestRFiles(t *testing.T) {
	w := startR(t, rConfig)
	in := base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n3,4\n"))
	evs := w.run("d <- read.csv('data/in.csv')\nwrite.csv(d * 2, '/output/twice.csv', row.names = FALSE)\n"+
		"dir.create('/output/sub'); saveRDS(1, '/output/sub/one.rds')\nsum(d$b)",
		map[string]any{"input_files": []map[string]string{{"path": "data/in.csv", "data": in}}})
	r := wantSuccess(t, evs, "files")
	if r.Value == nil || *r.Value != "6" {
		t.Errorf("value %v, want 6", r.Value)
	}
	var files []string
	for _, ev := range evs {
		if ev.Type == "file" {
			files = append(files, ev.Path+" "+ev.MIMEType)
			if ev.Path == "twice.csv" {
				b, _ := base64.StdEncoding.DecodeString(ev.Data)
				if string(b) != "\"a\",\"b\"\n2,4\n6,8\n" {
					t.Errorf("twice.csv = %q", b)
				}
			}
		}
	}
	if got, want := strings.Join(files, "; "), "sub/one.rds application/octet-stream; twice.csv text/csv"; got != want {
		t.Errorf("file events %q, want %q", got, want)
	}
	// A stateless call finds none of it.
	r = wantSuccess(t, w.run("c(file.exists('data/in.csv'), length(list.files('/output', recursive = TRUE)))", nil), "after")
	if r.Value == nil || compactJSON(t, *r.Value) != "[0,0]" {
		t.Errorf("after a stateless call: %v, want [0,0] (no input file, empty /output/)", r.Value)
	}
	for _, bad := range []string{"../x", "/etc/x", "a/../../x"} {
		evs := w.run("1", map[string]any{"input_files": []map[string]string{{"path": bad, "data": ""}}})
		if r := result(t, evs); r.Status != "run-error" || !strings.Contains(r.Error, "must be relative") {
			t.Errorf("input file %q: %s %q, want run-error", bad, r.Status, r.Error)
		}
	}
}
