// Package nginxrun writes the prefix folder in which the nginx test
// (cmd/pyrun/nginx_test.go) and the benchmark's lb measurement
// (scripts/bench/lb.go) run nginx in front of pyrun instances: the shipped
// site config (configs/nginx/pyrun.conf, already pointed at the instances)
// included from a main config of their own, which keeps every path nginx
// writes under the folder, so that nginx runs as an ordinary user.
package nginxrun

import (
	"fmt"
	"os"
	"path/filepath"
)

// Main is what the two callers' main configs differ in.
type Main struct {
	Workers    int    // worker_processes
	ErrorLevel string // error_log's level: "info", "warn"
	// AccessLogFormat, if set, is the format of an access log written to
	// access.log in the folder; without it there is none.
	AccessLogFormat string
}

// WritePrefix writes site as pyrun.conf and a main config including it
// into dir, makes the temp folders nginx's workers write to, and returns
// the main config's path: run nginx with -p dir -c that path.
func WritePrefix(dir, site string, m Main) (string, error) {
	// nginx's workers run as nobody: they need to reach the temp paths.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	for _, sub := range []string{"body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o777); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pyrun.conf"), []byte(site), 0o644); err != nil {
		return "", err
	}
	access := "access_log off;"
	if m.AccessLogFormat != "" {
		access = fmt.Sprintf("log_format lb '%s';\n    access_log %s/access.log lb;", m.AccessLogFormat, dir)
	}
	main := fmt.Sprintf(`daemon off;
worker_processes %[2]d;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log %[3]s;
events { worker_connections 1024; }
http {
    %[4]s
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/pyrun.conf;
}
`, dir, m.Workers, m.ErrorLevel, access)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		return "", err
	}
	return path, nil
}
