package supervisor

import (
	"regexp"
)

// denoHint is the advice Deno appends to a refused permission, for whoever
// runs deno: `Requires net access to "127.0.0.1:8080", run again with the
// --allow-net flag`. The code's author cannot run Deno with other flags,
// and an agent told to would look for a flag pyrun does not have.
var denoHint = regexp.MustCompile(`, run again with the --allow-([a-z-]+) flag`)

// explainDenied replaces Deno's advice in a call's error with what pyrun
// lets the code reach and which of pyrun's own options decide it: the
// network by --network (none for an engine whose code gets no network),
// host files by --mount, nothing else ever.
func explainDenied(text string, cfg Config) string {
	if len(text) < len(", run again with the --allow-net flag") {
		return text
	}
	return denoHint.ReplaceAllStringFunc(text, func(m string) string {
		switch denoHint.FindStringSubmatch(m)[1] {
		case "net":
			return ": " + networkAdvice(cfg)
		case "read":
			return ": pyrun lets code read only the host folders mounted with --mount"
		case "write":
			return ": pyrun lets code write only to host folders mounted with --mount ...:rw"
		}
		return ": pyrun never grants that to code"
	})
}

// networkAdvice says what a call's code may reach over the network.
func networkAdvice(cfg Config) string {
	if cfg.networkless {
		return "this language's code has no network in pyrun, whatever --network says"
	}
	switch cfg.Network {
	case NetworkNone:
		return "pyrun runs code with --network none, which reaches no address (pyrun started with --network public reaches public ones)"
	case NetworkPackages:
		return "pyrun runs code with --network packages, which reaches only the package index's hosts (pyrun started with --network public reaches public addresses)"
	case NetworkPublic:
		return "pyrun runs code with --network public, which reaches public addresses, not loopback, private or this host's own (pyrun started with --network all reaches them)"
	}
	return "pyrun's --network does not let code reach it"
}
