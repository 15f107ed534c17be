package supervisor_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// TestRefusedNetworkNamesPyrunsOption: code refused an address is told
// which of pyrun's --network modes it runs under and which would reach it,
// not Deno's "run again with the --allow-net flag", which names a flag
// pyrun does not have. Nothing is reached either way.
func TestRefusedNetworkNamesPyrunsOption(t *testing.T) {
	srv := newSecretServer(t)
	py := fmt.Sprintf("from pyodide.http import pyfetch\nawait pyfetch('http://127.0.0.1:%d/')", srv.port)
	for _, tc := range []struct {
		name string
		pool *supervisor.Pool
		code string
		want []string
	}{
		{"python, public", realPool(t, supervisor.Config{Workers: 1, Network: supervisor.NetworkPublic}), py,
			[]string{"--network public", "not loopback, private or this host's own", "--network all reaches them"}},
		{"python, none", realPool(t, supervisor.Config{Workers: 1, Network: supervisor.NetworkNone}), py,
			[]string{"--network none", "reaches no address"}},
		{"javascript", realJSPool(t, supervisor.Config{Workers: 1, Network: supervisor.NetworkAll}),
			fmt.Sprintf("await fetch('http://127.0.0.1:%d/')", srv.port),
			[]string{"this language's code has no network in pyrun, whatever --network says"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.pool, supervisor.Job{Code: tc.code})
			if res.Status != supervisor.StatusRunError || !strings.Contains(res.Error, fmt.Sprintf(`Requires net access to "127.0.0.1:%d": `, srv.port)) {
				t.Fatalf("status %s, error %q; want a run-error naming the refused address", res.Status, res.Error)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Error, w) {
					t.Errorf("error %q does not say %q", res.Error, w)
				}
			}
			if strings.Contains(res.Error, "--allow-net") {
				t.Errorf("error %q names Deno's flag", res.Error)
			}
		})
	}
	if n := srv.conns.Load(); n != 0 {
		t.Errorf("the server got %d connections", n)
	}
}
