package supervisor

import (
	"fmt"
	"path/filepath"
)

// RuntimeDir is the folder under root that holds the runtime of this pyrun
// version (Provision installs it there).
func RuntimeDir(root string) (string, error) {
	hash, err := hostHash()
	if err != nil {
		return "", fmt.Errorf("hash worker program: %w", err)
	}
	return filepath.Join(root, "host-"+hash), nil
}

// OpenRuntime returns the runtime under root if it is installed, without
// installing anything; its error says what is missing.
func OpenRuntime(root string) (*Runtime, error) {
	dir, err := RuntimeDir(root)
	if err != nil {
		return nil, err
	}
	return openRuntime(root, dir)
}
