package checkpoint

// Records are authenticated (docs/sessions.md, How it is kept): each ends in
// an HMAC-SHA256, under the store's key, of all before it, header included,
// and the header names the session, its owner and the record's sequence
// number. Someone who can write to the store but has not the key cannot
// make a record pyrun restores, nor change whose session a record is, nor
// which session it is; the sequence numbers, which the store keeps too
// (Store.Seqs), make an older record put back in place of a newer one
// refused.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	"github.com/pyrun/pyrun/supervisor/sessions"
)

// MinKeyLen is the fewest bytes a store key has.
const MinKeyLen = 32

// ErrReplay: a record older than the newest the store has seen of its
// session, put back in its place (or a write of one).
var ErrReplay = errors.New("the record is older than the newest the store has seen of its session (put back in its place?)")

// newMAC is the authentication of records under key.
func newMAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// sumOf is body's authentication code under key.
func sumOf(key, body []byte) []byte {
	h := newMAC(key)
	h.Write(body)
	return h.Sum(nil)
}

// ReadKeyFile reads a store key (--session-store-key-file): the file's
// bytes less one trailing newline, at least MinKeyLen of them (openssl
// rand -hex 32 makes one). A link is followed (a Kubernetes Secret's files
// are links), to a regular file only.
func ReadKeyFile(path string) ([]byte, error) { return readKey(path, 0) }

func readKey(path string, flags int) ([]byte, error) {
	b, err := readBounded(path, maxSmallFile, flags)
	if err == nil && b == nil {
		err = fmt.Errorf("open %s: %w", path, os.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("session store key: %w", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) < MinKeyLen {
		return nil, fmt.Errorf("session store key %s: %d bytes, want at least %d (openssl rand -hex 32 > FILE makes one)", path, len(b), MinKeyLen)
	}
	return b, nil
}

// dirKeyName is the key a dir: store makes for itself in its folder.
const dirKeyName = ".key"

// DirKey is the key of the dir: store at path when none is given: the
// folder's .key, made on first use (32 random bytes, in hex, readable by
// pyrun's user only). Instances sharing the folder share it: the first to
// start makes it whole (written aside, then linked into place), and the
// others read it.
func DirKey(path string) ([]byte, error) {
	name := filepath.Join(path, dirKeyName)
	if key, err := readKey(name, noFollow); err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("session store key: %w", err)
	}
	f, err := os.CreateTemp(path, ".tmp-key-*")
	if err != nil {
		return nil, fmt.Errorf("session store key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(hex.EncodeToString(raw[:]) + "\n")
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp's mode already; said for the reader
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link fails if another instance made it meanwhile: its key wins.
		if err = os.Link(f.Name(), name); errors.Is(err, os.ErrExist) {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("session store key: %w", err)
	}
	return readKey(name, noFollow)
}

// nextSeqs is the sequence number each session of saved's next record has:
// one past the newest the store has seen of it. Only the holder of a
// session's lease writes its records, so nobody takes the number meanwhile
// (and Put refuses a number not past the store's).
func (k *Keeper) nextSeqs(ctx context.Context, saved []sessions.Saved) (map[string]uint64, error) {
	seqs := make(map[string]uint64, len(saved))
	for _, s := range saved {
		latest, _, err := k.store.Seqs(ctx, s.ID)
		if err != nil {
			return nil, fmt.Errorf("checkpoint of session %s: %w", s.ID, err)
		}
		seqs[s.ID] = latest + 1
	}
	return seqs, nil
}

// checkSeq refuses m, read from the store's latest record (latest) or the
// one before it, when it is older than the store's newest of that place.
// A record newer than the store says is one whose write the store did not
// finish recording (a crash between the two): it is kept.
func checkSeq(m Meta, floor uint64) error {
	if m.Seq < floor {
		return fmt.Errorf("%w: %w: it is record %d, the store has seen %d", ErrCorrupt, ErrReplay, m.Seq, floor)
	}
	return nil
}
