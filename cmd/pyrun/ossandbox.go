package main

import (
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// checkOSSandbox says, once at start, which layers of the OS sandbox
// (supervisor/oswall) workers will start behind: a warning for each layer
// --os-sandbox auto finds missing, one when it is off, and an error when
// --os-sandbox required finds seccomp or Landlock missing (pyrun then
// does not start).
func checkOSSandbox(o *options, log hclog.Logger) (oswall.Status, error) {
	mode := o.supervisor.OSSandbox
	support := oswall.Probe()
	st := oswall.Describe(mode, support)
	if _, err := oswall.Plan(mode, support); err != nil {
		return st, err
	}
	if mode == oswall.ModeOff {
		log.Warn("the OS sandbox is off (--os-sandbox off): Deno's permissions alone stand between the code workers run and this machine")
		return st, nil
	}
	for _, l := range oswall.Layers {
		if why, ok := st.Missing[l]; ok {
			log.Warn("this machine does not offer a layer of the OS sandbox: workers start without it", "layer", l, "why", why)
		}
	}
	log.Debug("OS sandbox", "mode", st.Mode, "layers", st.Layers, "landlock_abi", st.LandlockABI)
	return st, nil
}

// describeOSSandbox is st in one line, for pyrun warmup.
func describeOSSandbox(st oswall.Status) string {
	if st.Mode == oswall.ModeOff {
		return "off: workers have Deno's permissions alone"
	}
	var names []string
	for _, l := range st.Layers {
		if l == oswall.LayerLandlock {
			names = append(names, fmt.Sprintf("landlock (ABI %d)", st.LandlockABI))
			continue
		}
		names = append(names, string(l))
	}
	s := fmt.Sprintf("%s: %s", st.Mode, strings.Join(names, ", "))
	var missing []string
	for _, l := range oswall.Layers {
		if why, ok := st.Missing[l]; ok {
			missing = append(missing, fmt.Sprintf("%s (%s)", l, why))
		}
	}
	if len(missing) > 0 {
		s += "; missing: " + strings.Join(missing, "; ")
	}
	return s
}
