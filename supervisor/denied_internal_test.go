package supervisor

import "testing"

func TestExplainDenied(t *testing.T) {
	public := Config{Network: NetworkPublic}
	for _, tc := range []struct {
		in   string
		cfg  Config
		want string
	}{
		{`PermissionError: Requires read access to "/etc/passwd", run again with the --allow-read flag`, public,
			`PermissionError: Requires read access to "/etc/passwd": pyrun lets code read only the host folders mounted with --mount`},
		{`Requires env access to "HOME", run again with the --allow-env flag`, public, `Requires env access to "HOME": pyrun never grants that to code`},
		{`Requires net access to "10.0.0.1:80", run again with the --allow-net flag`, Config{Network: NetworkPackages},
			`Requires net access to "10.0.0.1:80": pyrun runs code with --network packages, which reaches only the package index's hosts (pyrun started with --network public reaches public addresses)`},
		// Text that only looks like it is left alone.
		{`run again with the --allow-net flag`, public, `run again with the --allow-net flag`},
		{"", public, ""},
	} {
		if got := explainDenied(tc.in, tc.cfg); got != tc.want {
			t.Errorf("explainDenied(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
