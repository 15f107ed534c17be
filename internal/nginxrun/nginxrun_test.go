package nginxrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/internal/testtier"
)

// The main config written is one nginx accepts (nginx -t), with and
// without an access log, and every path in it is under the folder.
func TestWritePrefixIsValid(t *testing.T) {
	testtier.Needs(t, "nginx")
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			t.Fatal("nginx is not installed (Debian: apt-get install nginx; .ci/run does)")
		}
	}
	site := "server { listen 127.0.0.1:1; location / { return 204; } }\n"
	for _, m := range []Main{
		{Workers: 2, ErrorLevel: "info", AccessLogFormat: "$status $request_uri"},
		{Workers: 1, ErrorLevel: "warn"},
	} {
		dir := t.TempDir()
		conf, err := WritePrefix(dir, site, m)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-t", "-p", dir, "-c", conf).CombinedOutput(); err != nil {
			t.Errorf("%+v: nginx -t: %v\n%s", m, err, out)
		}
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			if strings.HasPrefix(f, "/") && !strings.HasPrefix(f, dir+string(filepath.Separator)) {
				t.Errorf("%+v: path %s outside the folder %s", m, f, dir)
			}
		}
		if got := strings.Contains(string(b), "access.log"); got != (m.AccessLogFormat != "") {
			t.Errorf("%+v: access.log in the config: %v", m, got)
		}
	}
}
