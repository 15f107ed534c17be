package checkpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// incWorker is a session's worker that takes increments as the real one
// does (pyodide-host/chunks.ts): it names each checkpoint asked with since,
// and one asked with the name of its last leaves out the heap's chunks that
// are as they were then. Its state is mem (a memory snapshot) and files.
type incWorker struct {
	mem, files []byte
	token      string // the last checkpoint's name
	then       []byte // its heap
	n          int
}

func (w *incWorker) Run(context.Context, supervisor.Job, supervisor.Events) (supervisor.Result, error) {
	return supervisor.Result{}, nil
}
func (w *incWorker) Lost() string    { return "" }
func (w *incWorker) TryLost() string { return "" }
func (w *incWorker) Current() bool   { return true }
func (w *incWorker) Close()          {}
func (w *incWorker) Kill(string)     {}

func (w *incWorker) Checkpoint(ctx context.Context, take func(*supervisor.Image) error) error {
	return take(&supervisor.Image{Mem: int64(len(w.mem)), FS: int64(len(w.files)),
		R: io.MultiReader(bytes.NewReader(w.mem), bytes.NewReader(w.files))})
}

func (w *incWorker) CheckpointSince(ctx context.Context, since string, take func(*supervisor.Image) error) error {
	off, err := heapOffset(w.mem)
	if err != nil {
		return err
	}
	heap := w.mem[off:]
	w.n++
	img := &supervisor.Image{Mem: int64(len(w.mem)), FS: int64(len(w.files)), Token: fmt.Sprintf("t%d", w.n)}
	parts := []io.Reader{bytes.NewReader(w.mem[:off])}
	const C = supervisor.CheckpointChunk
	for i := 0; i*C < len(heap); i++ {
		c := heap[i*C : min((i+1)*C, len(heap))]
		if since != "" && since == w.token && i*C < len(w.then) && bytes.Equal(c, w.then[i*C:min((i+1)*C, len(w.then))]) {
			if n := len(img.Kept); n > 0 && img.Kept[n-1][0]+img.Kept[n-1][1] == int64(i) {
				img.Kept[n-1][1]++
			} else {
				img.Kept = append(img.Kept, [2]int64{int64(i), 1})
			}
			img.LeftOut += int64(len(c))
			continue
		}
		parts = append(parts, bytes.NewReader(c))
	}
	if img.LeftOut > 0 {
		img.Since = since
	}
	img.R = io.MultiReader(append(parts, bytes.NewReader(w.files))...)
	w.token, w.then = img.Token, bytes.Clone(heap)
	return take(img)
}

// incKeeper is a Keeper on a dir: store holding box.1's lease, and its
// store's folder.
func incKeeper(t *testing.T) (*Keeper, string) {
	t.Helper()
	dir := t.TempDir()
	store, err := OpenDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKeeper(store, testKey, nil, filepath.Join(dir, ".restore"), 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Hold(t.Context(), "box.1", ""); err != nil {
		t.Fatal(err)
	}
	return k, dir
}

// incState is a memory snapshot of chunks heap chunks (random bytes,
// which no compression shortens) and files.
func incState(chunks int) *incWorker {
	heap := make([]byte, chunks*supervisor.CheckpointChunk)
	rand.Read(heap)
	return &incWorker{mem: fakeMem(heap), files: []byte("PYRUNFS1 files")}
}

func (w *incWorker) load(t *testing.T, k *Keeper, wantAfter int) {
	t.Helper()
	m, img, err := k.Load(t.Context(), "box.1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(img.R)
	if err != nil {
		t.Fatal(err)
	}
	if m.AfterCall != wantAfter || img.Mem != int64(len(w.mem)) || !bytes.Equal(got, append(bytes.Clone(w.mem), w.files...)) {
		t.Fatalf("restored after call %d (want %d), %d bytes of memory (want %d), state equal: %v",
			m.AfterCall, wantAfter, img.Mem, len(w.mem), bytes.Equal(got, append(bytes.Clone(w.mem), w.files...)))
	}
}

// A checkpoint of a state that did not change since the one before copies
// that one's frames instead of compressing the heap again, and the record
// is whole: it restores to the state, as the one before does.
func TestAnUnchangedCheckpointReusesTheFramesBefore(t *testing.T) {
	k, _ := incKeeper(t)
	w := incState(20)
	if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: 1}}); err != nil {
		t.Fatal(err)
	}
	if l := k.Last(); l.Frames != 20 || l.Reused != 0 {
		t.Errorf("the first checkpoint: %d frames, %d reused, want 20, 0", l.Frames, l.Reused)
	}
	first := k.Last().Stored
	if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: 2}}); err != nil {
		t.Fatal(err)
	}
	if l := k.Last(); l.Frames != 20 || l.Reused != 20 || l.Stored < first-64 || l.Stored > first+64 {
		t.Errorf("unchanged: %d frames, %d reused, %d bytes stored (the first %d), want all 20 reused, the same size",
			l.Frames, l.Reused, l.Stored, first)
	}
	w.load(t, k, 2)
}

// A chunk that changed is sent and compressed again; the others are
// copied; the record restores to the new state. A state that grew has its
// new chunks compressed, and a worker that knows nothing of the checkpoint
// before (restored, started again) sends the whole state.
func TestAChangedChunkIsEncodedAgain(t *testing.T) {
	k, _ := incKeeper(t)
	w := incState(20)
	save := func(call int) Sizes {
		t.Helper()
		if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: call}}); err != nil {
			t.Fatal(err)
		}
		return k.Last()
	}
	save(1)
	off, _ := heapOffset(w.mem)
	w.mem[off+7*supervisor.CheckpointChunk+100] ^= 1   // chunk 7
	w.mem[off+19*supervisor.CheckpointChunk+5] ^= 0x80 // the last
	w.mem[3] ^= 1                                      // the snapshot's own header
	if l := save(2); l.Frames != 20 || l.Reused != 18 {
		t.Errorf("two chunks changed: %d frames, %d reused, want 20, 18", l.Frames, l.Reused)
	}
	w.load(t, k, 2)
	w.mem = append(w.mem, bytes.Repeat([]byte("more"), supervisor.CheckpointChunk/4+10)...)
	if l := save(3); l.Frames != 22 || l.Reused != 20 {
		t.Errorf("grown by a chunk and a bit: %d frames, %d reused, want 22, 20", l.Frames, l.Reused)
	}
	w.load(t, k, 3)
	if l := save(4); l.Reused != 22 {
		t.Errorf("unchanged again: %d reused, want 22", l.Reused)
	}
	// A worker that no longer knows the token sends the whole state.
	w.token = ""
	if l := save(5); l.Reused != 0 {
		t.Errorf("a worker that lost its sums: %d reused, want 0", l.Reused)
	}
	w.load(t, k, 5)
}

// A worker is not trusted with its increments: one that names chunks the
// record before has not, or miscounts what it left out, or an increment to
// a checkpoint this pyrun does not hold, fails the checkpoint, and the
// records kept stay.
func TestABadIncrementIsRefused(t *testing.T) {
	k, _ := incKeeper(t)
	w := incState(4)
	if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		bend func(img *supervisor.Image)
	}{
		{"a chunk past the heap", func(img *supervisor.Image) { img.Kept = [][2]int64{{0, 4}, {4, 1}} }},
		{"a chunk twice", func(img *supervisor.Image) { img.Kept = [][2]int64{{0, 4}, {1, 1}} }},
		{"miscounted", func(img *supervisor.Image) { img.LeftOut-- }},
		{"to another checkpoint", func(img *supervisor.Image) { img.Since = "t0" }},
	} {
		bent := &bentWorker{incWorker: w, bend: tc.bend}
		err := k.Take(t.Context(), bent, []sessions.Saved{{ID: "box.1", AfterCall: 9}})
		if err == nil {
			t.Errorf("%s: taken", tc.what)
		}
	}
	w.load(t, k, 1)
}

// bentWorker is an incWorker whose increments bend changes.
type bentWorker struct {
	*incWorker
	bend func(*supervisor.Image)
}

func (b *bentWorker) CheckpointSince(ctx context.Context, since string, take func(*supervisor.Image) error) error {
	b.incWorker.token, b.incWorker.then = since, bytes.Clone(b.mem[16:]) // all kept
	return b.incWorker.CheckpointSince(ctx, since, func(img *supervisor.Image) error {
		b.bend(img)
		return take(img)
	})
}

// A record made of copied frames is authenticated as any: a byte changed
// in it, in a copied frame or elsewhere, is refused, and the record before
// it is restored instead.
func TestATamperedIncrementIsRefused(t *testing.T) {
	k, dir := incKeeper(t)
	w := incState(6)
	for call := 1; call <= 2; call++ {
		if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: call}}); err != nil {
			t.Fatal(err)
		}
	}
	if l := k.Last(); l.Reused != 6 {
		t.Fatalf("%d frames reused, want 6", l.Reused)
	}
	latest := filepath.Join(dir, "box.1.ckpt")
	rec, err := os.ReadFile(latest)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{len(rec) / 2, len(rec) - 40, 20} {
		bad := bytes.Clone(rec)
		bad[at] ^= 1
		if _, _, _, err := Decode(bad, 1<<30, nil, testKey); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d of %d changed: %v, want ErrCorrupt", at, len(rec), err)
		}
	}
	bad := bytes.Clone(rec)
	bad[len(rec)/2] ^= 1
	if err := os.WriteFile(latest, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	w.load(t, k, 1)
}

// Records of one zstd stream, as pyrun wrote them before records were
// made of a frame a chunk, still decode (testdata/stream.ckpt: a 3 MB
// heap against a base, written by that pyrun's Encode).
func TestARecordOfOneStreamStillDecodes(t *testing.T) {
	rec, err := os.ReadFile("testdata/stream.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	base, mem := offBase(300000, 1<<20+5, "the session's own bytes")
	m, gotMem, gotFiles, err := Decode(rec, 1<<30, func(sha string) []byte {
		return map[string][]byte{"sha-of-base": base}[sha]
	}, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if m.Session != "box.old" || m.Seq != 7 || !bytes.Equal(gotMem, mem) || string(gotFiles) != "PYRUNFS1 files of a record of one zstd stream" {
		t.Errorf("decoded %+v, memory equal %v, files %q", m, bytes.Equal(gotMem, mem), gotFiles)
	}
}
