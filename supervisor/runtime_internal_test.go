package supervisor

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

// Engines other than Python keep their programs in sub-folders of the
// worker program (pyodide-host/webr/, js/): the runtime gets them as they are.
func TestWriteFilesMakesSubFolders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host")
	files := fstest.MapFS{
		"main.ts":          {Data: []byte("python")},
		"webr/main.ts":     {Data: []byte("r")},
		"js/lib/worker.ts": {Data: []byte("js")},
	}
	if err := writeFiles(dir, files); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"main.ts": "python", "webr/main.ts": "r", "js/lib/worker.ts": "js"} {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}
