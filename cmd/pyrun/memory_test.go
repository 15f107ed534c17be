package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The output store lives on disk, in a folder pyrun makes in --output-dir
// and removes when it stops: a call's /output/ file is a file there (not
// in pyrun's memory), read back whole with resources/read.
func TestServeKeepsOutputsOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--workers", "1", "--output-dir", dir)
	c := s.connect(t, "mcp", "", nil)
	r := c.run(t, "open('/output/big.bin', 'wb').write(bytes(range(256)) * 12288)")
	if len(r.sc.Files) != 1 || r.sc.Files[0].Bytes != 3<<20 {
		t.Fatalf("files: %+v\n%s", r.sc.Files, r.text)
	}
	folders, _ := filepath.Glob(filepath.Join(dir, "pyrun-outputs-*"))
	if len(folders) != 1 {
		t.Fatalf("pyrun's folders in --output-dir: %v, want one", folders)
	}
	held, _ := filepath.Glob(filepath.Join(folders[0], "pyrun-output-*"))
	if len(held) != 1 {
		t.Fatalf("files in the output store's folder: %v, want one", held)
	}
	if st, err := os.Stat(held[0]); err != nil || st.Size() != 3<<20 {
		t.Errorf("the stored file: %v %v", st, err)
	}
	res, err := readResource(t, c, r.sc.Files[0].URI)
	if err != nil || len(res.Contents) != 1 || len(res.Contents[0].Blob) != 3<<20 || res.Contents[0].Blob[257] != 1 {
		t.Fatalf("read back: %v", err)
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(callTimeout); code != 0 {
		t.Fatalf("pyrun serve exited with %d", code)
	}
	if _, err := os.Stat(folders[0]); !os.IsNotExist(err) {
		t.Errorf("pyrun's output folder is still there after it stopped: %v", err)
	}
}

// pyrun's Go heap has a soft limit (it used to have none, and a garbage
// collection target of 400% let it grow to five times what it held):
// derived from the other limits by default, or --go-memory-limit.
func TestServeGoMemoryLimit(t *testing.T) {
	o, _, err := loadOptions("serve", []string{"--workers", "1"})
	if err != nil {
		t.Fatal(err)
	}
	want := float64(o.goHeapLimit())
	if want < 256<<20 || want > 448<<20 {
		t.Errorf("the derived limit for one worker is %v MiB; want it well under 512 MiB", want/(1<<20))
	}
	s := startServe(t, "--workers", "1")
	if got := s.metrics(t)["go_gc_gomemlimit_bytes"]; got != want {
		t.Errorf("go_gc_gomemlimit_bytes is %v, want the derived %v", got, want)
	}
	s = startServe(t, "--workers", "1", "--go-memory-limit", "300MiB")
	if got := s.metrics(t)["go_gc_gomemlimit_bytes"]; got != 300<<20 {
		t.Errorf("go_gc_gomemlimit_bytes is %v with --go-memory-limit 300MiB", got)
	}
}

// The request byte limits resolve their defaults from --max-code (room
// for two of the largest requests per client, four clients' worth in all)
// and refuse values that would refuse every large request.
func TestRequestLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		client, total int64
		maxInputFiles int
		goMemoryLimit int64
	}{
		{nil, 16 << 20, 64 << 20, 1000, 0},
		{[]string{"--max-code", "8MiB"}, 34 << 20, 136 << 20, 1000, 0},
		{[]string{"--client-max-request-bytes", "4MiB", "--max-request-bytes", "4MiB", "--max-input-files", "3", "--go-memory-limit", "200MiB"}, 4 << 20, 4 << 20, 3, 200 << 20},
	} {
		o, _, err := loadOptions("serve", tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if l := o.mcp.RequestLimits(); l.ClientMaxBytes != tc.client || l.MaxBytes != tc.total {
			t.Errorf("%v: request limits %+v, want client %d and total %d", tc.args, l, tc.client, tc.total)
		}
		if o.mcp.MaxInputFiles != tc.maxInputFiles {
			t.Errorf("%v: max-input-files %d", tc.args, o.mcp.MaxInputFiles)
		}
		if tc.goMemoryLimit != 0 && o.goHeapLimit() != tc.goMemoryLimit {
			t.Errorf("%v: go memory limit %d", tc.args, o.goHeapLimit())
		}
	}
	for _, bad := range [][]string{
		{"--client-max-request-bytes", "1MiB"},
		{"--max-code", "8MiB", "--client-max-request-bytes", "16MiB"},
		{"--client-max-request-bytes", "32MiB", "--max-request-bytes", "16MiB"},
		{"--go-memory-limit", "1MiB"}, {"--max-input-files", "0"}, {"--max-input-files", "1000000"},
	} {
		if _, _, err := loadOptions("serve", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
