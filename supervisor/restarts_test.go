package supervisor

import "testing"

func TestRestartKind(t *testing.T) {
	for reason, want := range map[string]string{
		killMemory:                               RestartMemory,
		"the call ran out of memory":             RestartMemory,
		"it did not stop after an interrupt":     RestartInterrupt,
		"it could not be interrupted":            RestartInterrupt,
		"it broke the protocol":                  RestartProtocol,
		"it did not accept a call":               RestartProtocol,
		"it failed a call":                       RestartProtocol,
		"the configuration changed":              RestartConfig,
		"the pool shrank":                        RestartShrink,
		"isolation process: one call per worker": RestartIsolation,
		"it exited":                              RestartCrash,
		"the call changed /lib/python3.14/x.py":  RestartRecycle,
		killSpin:                                 RestartRecycle,
		"something new":                          RestartCrash,
	} {
		if got := restartKind(reason); got != want {
			t.Errorf("restartKind(%q) = %q, want %q", reason, got, want)
		}
	}
}
