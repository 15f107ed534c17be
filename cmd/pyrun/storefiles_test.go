package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// storeKeyFile is a --session-store-key-file for the test.
func storeKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store-key")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789abcdef", 4)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A redis:// store needs a key file, the same in every instance that
// shares it: without one pyrun refuses to start, and says what to give.
// A dir: store does without (it makes its own).
func TestRedisStoreNeedsAKeyFile(t *testing.T) {
	_, _, err := loadOptions("serve", []string{"--session-store", "redis://127.0.0.1:6379/0"})
	if err == nil || !strings.Contains(err.Error(), "needs --session-store-key-file") || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("a redis store without a key file: %v", err)
	}
	if _, _, err := loadOptions("serve", []string{"--session-store", "redis://127.0.0.1:6379/0", "--session-store-key-file", "/run/secrets/key"}); err != nil {
		t.Errorf("with a key file: %v", err)
	}
	if _, _, err := loadOptions("serve", []string{"--session-store", "dir:" + t.TempDir()}); err != nil {
		t.Errorf("a dir: store without a key file: %v", err)
	}
}
