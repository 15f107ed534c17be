package oswall

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Probe says which layers this machine offers. It starts a launcher that
// applies every layer to itself and reports which took, so that what the
// kernel has and what confines pyrun (a container's seccomp profile,
// systemd's SystemCallFilter and RestrictNamespaces) both count. The
// answer cannot change while the process runs: it is found once.
func Probe() Support { return probeOnce() }

var probeOnce = sync.OnceValue(probe)

// probeTimeout bounds one probe launch, a few milliseconds normally.
const probeTimeout = 20 * time.Second

func probe() Support {
	s := Support{Missing: map[Layer]string{}}
	if v, err := ll.LandlockGetABIVersion(); err == nil {
		s.LandlockABI = v
	}
	all := Set{Base: true, Seccomp: true, Landlock: true, NetNS: true}
	res, err := runProbe(all)
	if err != nil {
		// Most often: no user namespaces (a container's seccomp profile,
		// RestrictNamespaces, a sysctl). Without the namespace:
		netErr := err
		all.NetNS = false
		if res, err = runProbe(all); err == nil {
			s.Missing[LayerNetNS] = "cannot make a user and network namespace: " + netErr.Error()
		}
	}
	if err != nil {
		for _, l := range Layers {
			s.Missing[l] = "pyrun cannot start itself as the sandbox's launcher: " + err.Error()
		}
		s.LandlockABI = 0
		return s
	}
	for _, l := range Layers {
		why, ok := res[l]
		switch {
		case !ok && all.has(l):
			s.Missing[l] = "the launcher did not report it"
		case why != "":
			s.Missing[l] = why
		}
	}
	if !s.Has(LayerLandlock) {
		s.LandlockABI = 0
	}
	return s
}

// runProbe runs a launcher in probe mode with the layers of set.
func runProbe(set Set) (map[Layer]string, error) {
	l := launch{Policy: Policy{Read: []string{"/"}, Layers: set}, Probe: true}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = []string{launcherName}
	cmd.Env = []string{envPolicy + "=" + string(b)}
	if err := wrapProcAttr(cmd, l.Policy); err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if t := strings.TrimSpace(stderr.String()); t != "" {
			err = fmt.Errorf("%w: %s", err, t)
		}
		return nil, err
	}
	var res map[Layer]string
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("the launcher's report %q: %w", out, err)
	}
	return res, nil
}
