package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A dir: store opens in a folder that is not there yet, which it makes
// with its own key; none keeps nothing; a key file is read; what does not
// check is refused as the flags name it.
func TestStoreConfigOpens(t *testing.T) {
	where := filepath.Join(t.TempDir(), "state", "sessions")
	k, err := StoreConfig{Where: "dir:" + where, Lease: 5 * time.Second}.Open(t.Context(), nil, 0, "box", hclog.NewNullLogger())
	if err != nil || k == nil {
		t.Fatalf("a dir: store in a new folder: %v, %v", k, err)
	}
	if k.ttl != 5*time.Second || k.holder != "box" {
		t.Errorf("leases %s as %q, want 5s as box", k.ttl, k.holder)
	}
	if _, err := os.Stat(filepath.Join(where, ".key")); err != nil {
		t.Errorf("the store's own key: %v", err)
	}
	if k, err := (StoreConfig{Where: None}).Open(t.Context(), nil, 0, "box", nil); k != nil || err != nil {
		t.Errorf("none: %v, %v; want no Keeper and no error", k, err)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", MinKeyLen)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err = StoreConfig{Where: "dir:" + t.TempDir(), KeyFile: keyFile}.Open(t.Context(), nil, 0, "box", hclog.NewNullLogger())
	if err != nil || k == nil || string(k.key) != strings.Repeat("k", MinKeyLen) || k.ttl != DefaultLeaseTTL {
		t.Errorf("with a key file: %v; want its key and the default lease", err)
	}
	if _, err := (StoreConfig{Where: "dir:" + t.TempDir(), KeyFile: filepath.Join(t.TempDir(), "none")}).Open(t.Context(), nil, 0, "box", nil); err == nil {
		t.Error("a key file that is not there: opened")
	}
	for _, c := range []struct {
		cfg  StoreConfig
		want string
	}{
		{StoreConfig{Where: "s3://b", Lease: time.Second}, "session-store must be dir:PATH"},
		{StoreConfig{Where: "redis://127.0.0.1:1/0", Lease: time.Second}, "needs --session-store-key-file"},
		{StoreConfig{Where: "dir:/x", Lease: 0}, "session-lease must be between 1s and 10m"},
		{StoreConfig{Where: None, Lease: time.Hour}, "session-lease must be between 1s and 10m"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (StoreConfig{Where: "dir:/x", Lease: time.Second}).Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
