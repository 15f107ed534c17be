package checkpoint

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/sessions"
)

// restoredState is a state whose heap has chunks of random bytes, of
// zeros (a zstd frame of one RLE block) and a last one cut short.
func restoredState() *incWorker {
	const C = supervisor.CheckpointChunk
	heap := make([]byte, 9*C+C/2)
	for i := 0; i < 9; i += 2 {
		rand.Read(heap[i*C : (i+1)*C])
	}
	rand.Read(heap[9*C:])
	return &incWorker{mem: fakeMem(heap), files: []byte("PYRUNFS1 files")}
}

// A restore copies the record as it reads it, and finds in the copy where
// the heap's frames are: where the Keeper put them when it wrote it. The
// copy is of the record that restores (the latest, or after a damaged
// latest the one before), byte for byte.
func TestARestoredRecordIsCopiedWithItsFrames(t *testing.T) {
	k, dir := incKeeper(t)
	w := restoredState()
	for call := 1; call <= 2; call++ {
		if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: call}}); err != nil {
			t.Fatal(err)
		}
		w.mem[len(w.mem)-1]++ // the second record is another
	}
	frames := k.lasts["box.1"].heap
	if len(frames) != 10 {
		t.Fatalf("the record's heap has %d frames, want 10", len(frames))
	}
	for _, damaged := range []bool{false, true} {
		latest := filepath.Join(dir, "box.1"+latestExt)
		if damaged {
			b, err := os.ReadFile(latest)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			if err := os.WriteFile(latest, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		spool, err := os.CreateTemp(t.TempDir(), "spool")
		if err != nil {
			t.Fatal(err)
		}
		// What was there before is overwritten, and cut at the record's end.
		spool.Write(bytes.Repeat([]byte{0xee}, 64<<20))
		m, img, err := k.load(t.Context(), "box.1", spool)
		if err != nil {
			t.Fatal(err)
		}
		p := img.R.(*Payload)
		if err := p.Spooled(); err == nil {
			t.Error("Spooled before the payload was read: nil, want an error")
		}
		if _, err := io.Copy(io.Discard, p); err != nil {
			t.Fatal(err)
		}
		if err := p.Spooled(); err != nil {
			t.Fatal(err)
		}
		if err := spool.Truncate(p.rec.Size()); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, "box.1"+map[bool]string{false: latestExt, true: prevExt}[damaged]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(spool.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("damaged latest %v: the copy (%d bytes) is not the record restored (%d bytes)", damaged, len(got), len(want))
		}
		wantAfter := map[bool]int{false: 2, true: 1}[damaged]
		if m.AfterCall != wantAfter {
			t.Errorf("damaged latest %v: restored after call %d, want %d", damaged, m.AfterCall, wantAfter)
		}
		found, err := heapFrames(spool, p.rec.Size(), m, p.start)
		if err != nil {
			t.Fatal(err)
		}
		if !damaged && !reflect.DeepEqual(found, frames) {
			t.Errorf("frames found %v, want those written %v", found, frames)
		}
		if damaged {
			// Its header may be a byte longer or shorter (its times): the
			// frames are of the same chunks, one after the other.
			ok := len(found) == len(frames) && found[0].off > p.start
			for i := 0; ok && i < len(found); i++ {
				ok = found[i].raw == frames[i].raw && (i == 0 || found[i].off == found[i-1].off+found[i-1].n)
			}
			if !ok {
				t.Errorf("the record before's frames %v, want %d of the chunks of %v, one after the other", found, len(frames), frames)
			}
		}
	}
}

// A record that is not frame after frame is refused, not read past.
func TestFramesOfADamagedPayloadAreRefused(t *testing.T) {
	k, dir := incKeeper(t)
	w := restoredState()
	if err := k.Take(t.Context(), w, []sessions.Saved{{ID: "box.1", AfterCall: 1}}); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(filepath.Join(dir, "box.1"+latestExt))
	if err != nil {
		t.Fatal(err)
	}
	m, start, err := ReadRecordMeta(NewRecord(rec), testKey)
	if err != nil {
		t.Fatal(err)
	}
	last := k.lasts["box.1"].heap[9]
	for _, cut := range []int64{start, start + 10, last.off + last.n/2} {
		bad := bytes.Clone(rec)
		if cut == start {
			bad[cut] ^= 0xff // the first frame's magic
		} else {
			bad = append(bad[:cut:cut], bytes.Repeat([]byte{0}, 32)...) // frames cut short
		}
		if _, err := heapFrames(bytes.NewReader(bad), int64(len(bad)), m, start); err == nil {
			t.Errorf("a payload damaged at %d: frames found, want an error", cut)
		}
	}
}
