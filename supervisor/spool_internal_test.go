package supervisor

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// A file's parts go to disk as they come: a 64 MiB file sent in 1 MiB
// events costs the supervisor no memory of its size (it used to gather
// every part in memory), and it comes back whole, from its spool file.
func TestOutputFilesAreSpooledToDisk(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SpoolDir: dir}.withDefaults()
	part := bytes.Repeat([]byte("x"), 1<<20)
	var r richResults
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 64 {
		ev := event{Type: "file", richEvent: richEvent{MIMEType: "application/octet-stream", Path: "big.bin", Data: part, More: i < 63}}
		if err := r.add(ev, cfg); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("taking a 64 MiB file allocated %d MiB", grew>>20)
	}
	var res Result
	r.fill(&res)
	if len(res.Files) != 1 || res.Files[0].Size != 64<<20 {
		t.Fatalf("files: %+v", res.Files)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files in the spool folder, want 1", len(entries))
	}
	if st, err := os.Stat(dir + "/" + entries[0].Name()); err != nil || st.Size() != 64<<20 || st.Mode().Perm() != 0o600 {
		t.Errorf("the spool file: %v %v", st, err)
	}
	dst := t.TempDir() + "/moved"
	if err := res.Files[0].Data.MoveTo(dst); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dst); err != nil || st.Size() != 64<<20 {
		t.Errorf("moved: %v %v", st, err)
	}
	if _, err := res.Files[0].Data.ReadAll(); err != ErrSpoolGone {
		t.Errorf("a moved file read again: %v, want ErrSpoolGone", err)
	}
}

// What is dropped leaves nothing on disk: a file over the byte cap, one
// past the file cap, one given twice, one whose last part never came.
func TestDroppedOutputFilesLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SpoolDir: dir, MaxFiles: 2, MaxFileBytes: 10}.withDefaults()
	var r richResults
	file := func(path, data string, more bool) {
		t.Helper()
		if err := r.add(event{Type: "file", richEvent: richEvent{MIMEType: "text/plain", Path: path, Data: []byte(data), More: more}}, cfg); err != nil {
			t.Fatal(err)
		}
	}
	file("a.txt", "12345", true)
	file("a.txt", "678901", false) // 11 bytes: over the cap
	file("b.txt", "1", false)
	file("b.txt", "2", false) // given twice
	file("c.txt", "3", false)
	file("d.txt", "4", false) // past MaxFiles
	file("e.txt", "5", true)  // never finished
	var res Result
	r.fill(&res)
	if len(res.Files) != 2 || res.FilesDropped != 4 {
		t.Errorf("%d files kept, %d dropped; want 2 and 4", len(res.Files), res.FilesDropped)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the spool folder, want the 2 kept", len(entries))
	}
	res.RemoveFiles()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d files in the spool folder after RemoveFiles", len(entries))
	}
}

// The events waiting for their call hold at most richQueue display or
// file events, however fast a worker writes them: the reader waits for the
// call to take one; once the worker is killed, it reads on to the end and
// drops them.
func TestRichEventsQueueIsBounded(t *testing.T) {
	w := newConn(Config{MaxOutput: 1 << 10})
	p := &process{killed: make(chan struct{})}
	pr, pw := io.Pipe()
	const sent = 12
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := range sent {
			data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{byte(i)}, 64<<10))
			fmt.Fprintf(pw, `{"type":"file","id":"c1","path":"f%d.bin","mime_type":"application/octet-stream","data":"%s"}`+"\n", i, data)
		}
		pw.Close()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.readEvents(p, pr)
	}()
	waitLen := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(w.events) != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d events queued, want %d", len(w.events), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitLen(richQueue)
	time.Sleep(200 * time.Millisecond) // room to go past the bound, if it could
	if n := len(w.events); n != richQueue {
		t.Fatalf("%d file events queued, want at most %d", n, richQueue)
	}
	// The call takes one: the reader queues the next.
	<-w.events
	w.tookRich()
	waitLen(richQueue)
	// Killed: the rest is read and dropped, and the reader ends.
	close(p.killed)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not end after the kill")
	}
	<-wrote
	n := 0
	for range w.events {
		n++
	}
	if n != richQueue {
		t.Errorf("%d events left for the call, want the %d queued before the kill", n, richQueue)
	}
}
