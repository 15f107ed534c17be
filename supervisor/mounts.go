package supervisor

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Mount is a host folder every worker sees at Path.
type Mount struct {
	Host string `json:"host"` // absolute path on the host
	Path string `json:"path"` // absolute path in the sandbox
	RW   bool   `json:"rw,omitempty"`
}

// ParseMount reads HOST_DIR:SANDBOX_DIR[:rw]. The host folder must exist;
// it is made absolute with symbolic links resolved, since Deno checks its
// permissions against the real path. The sandbox path must be absolute and
// not one of pyrun's own folders.
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	var m Mount
	switch {
	case len(parts) == 3 && parts[2] == "rw":
		m.RW = true
	case len(parts) == 3 && parts[2] == "ro":
	case len(parts) == 2:
	default:
		return m, fmt.Errorf("mount %q: want HOST_DIR:SANDBOX_DIR or HOST_DIR:SANDBOX_DIR:rw", s)
	}
	host, err := filepath.Abs(parts[0])
	if err == nil {
		host, err = filepath.EvalSymlinks(host)
	}
	if err != nil {
		return m, fmt.Errorf("mount %q: host folder: %w", s, err)
	}
	if st, err := os.Stat(host); err != nil || !st.IsDir() {
		return m, fmt.Errorf("mount %q: %s is not a folder", s, host)
	}
	m.Host = host
	sb := parts[1]
	if !strings.HasPrefix(sb, "/") || path.Clean(sb) != sb || sb == "/" {
		return m, fmt.Errorf("mount %q: the sandbox path must be absolute and clean, like /data", s)
	}
	// Pyodide's home and standard library, R's home (which a stateless
	// call's reset empties), R's installation under /usr, and /sessions,
	// where a shared session worker keeps the folders of the sessions
	// switched out (docs/sessions.md).
	for _, own := range []string{"/home/pyodide", "/home/web_user", "/tmp", "/output", "/lib", "/usr", "/dev", "/proc", "/sessions"} {
		if sb == own || strings.HasPrefix(sb, own+"/") || strings.HasPrefix(own, sb+"/") {
			return m, fmt.Errorf("mount %q: %s is pyrun's own folder or a language's (Pyodide's, R's)", s, own)
		}
	}
	m.Path = sb
	return m, nil
}
