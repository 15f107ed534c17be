package supervisor

// Watcher is implemented by Events that also follow a call through the
// pool: its wait for a worker, its start, and what pyrun does to it on the
// way. Pool.Run calls these methods like Events' methods: from the goroutine
// running the call, in order, and they must not block for long.
type Watcher interface {
	Events
	// Queued says that no worker was free and the call waits in line.
	// position gives the call's place in line (1: next) at any time and from
	// any goroutine, and 0 once the call has left the line. It costs a scan
	// of the line, so call it at a bounded rate.
	Queued(position func() int)
	// Started says that a worker took the call.
	Started(worker string)
	// Notice says what pyrun did to the call or to its worker.
	Notice(n Notice)
}

// Notice is pyrun's own word about a call while it runs: a limit it hit,
// an interrupt, a killed or replaced worker. A call gets a handful at most.
type Notice struct {
	// Severe is set when the call lost its worker: killed after an
	// interrupt did not stop it, crashed, or past its memory limit.
	Severe bool
	Text   string
}
