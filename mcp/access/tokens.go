package access

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The token file holds one client a line:
//
//	# comments and blank lines are ignored
//	alice:3q2-7Xv0rB9kGm1VtZcLwQ8sHfYdNaJp
//	ci-bot:Vb9Zt1kQ0mWx7LcR4pNs2HdGy6FjEa3u
//	Hk2Lw9Qz7Xc1Vb5Nm3Ts8Rd4Fg6Jy0Pa
//
// A line "name:token" names its client: the name is who the client is in
// logs, per-client limits and session ownership. A line with a token alone
// gets the name "token-" and the first 8 hex digits of the token's SHA-256,
// which says nothing useful about the token. Several lines may share a name
// (two tokens of one client while it moves to a new one).

// minTokenLen is the shortest token accepted: shorter ones are guessable.
const minTokenLen = 16

// maxTokenFile bounds the token file.
const maxTokenFile = 1 << 20

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._@+-]{1,64}$`)

// tokenEntry is one token, kept only as its SHA-256.
type tokenEntry struct {
	hash [sha256.Size]byte
	name string
}

// tokens is the set of tokens in force. Its methods are safe for
// concurrent use.
type tokens struct {
	path string

	mu      sync.RWMutex
	entries []tokenEntry
}

// ErrTokenFile is wrapped by every error about the token file's content.
var ErrTokenFile = errors.New("bad token file")

// parseTokens reads a token file's content.
func parseTokens(b []byte) ([]tokenEntry, error) {
	var out []tokenEntry
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), maxTokenFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, named := strings.Cut(line, ":")
		if !named {
			name, tok = "", line
		}
		switch {
		case named && !tokenName.MatchString(name):
			return nil, fmt.Errorf("%w: line %d: a name is 1 to 64 letters, digits or ._@+- (then a colon and the token)", ErrTokenFile, n)
		case len(tok) < minTokenLen:
			return nil, fmt.Errorf("%w: line %d: the token is shorter than %d characters", ErrTokenFile, n, minTokenLen)
		case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f || r > '~' }):
			return nil, fmt.Errorf("%w: line %d: a token is printable ASCII without spaces", ErrTokenFile, n)
		}
		h := sha256.Sum256([]byte(tok))
		if !named {
			name = "token-" + hex.EncodeToString(h[:4])
		}
		if prev, ok := seen[h]; ok {
			return nil, fmt.Errorf("%w: line %d: the same token as line %d", ErrTokenFile, n, prev)
		}
		seen[h] = n
		out = append(out, tokenEntry{hash: h, name: name})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenFile, err)
	}
	return out, nil
}

// load reads the file and puts its tokens in force. A file that cannot be
// read or parsed leaves the tokens in force as they were. open reports
// whether other users may read or change the file.
func (t *tokens) load() (names []string, open bool, err error) {
	b, mode, err := readSmall(t.path, maxTokenFile)
	if err != nil {
		return nil, false, fmt.Errorf("read token file: %w", err)
	}
	entries, err := parseTokens(b)
	if err != nil {
		return nil, false, fmt.Errorf("token file %s: %w", t.path, err)
	}
	t.mu.Lock()
	t.entries = entries
	t.mu.Unlock()
	for _, e := range entries {
		names = append(names, e.name)
	}
	slices.Sort(names)
	return slices.Compact(names), mode.Perm()&0o066 != 0, nil
}

// match returns the name of the client whose token tok is. It compares
// tok's hash with every token's in constant time, and looks at them all
// whatever matches, so its time says nothing about the tokens.
func (t *tokens) match(tok string) (string, bool) {
	h := sha256.Sum256([]byte(tok))
	t.mu.RLock()
	defer t.mu.RUnlock()
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.entries[found].name, true
}

// readSmall reads a file of at most limit bytes, and gives its mode.
func readSmall(path string, limit int64) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(b)) > limit {
		return nil, 0, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, fi.Mode(), nil
}
