package supervisor

import (
	"os/exec"

	"github.com/hashicorp/go-hclog"
)

// NewPoolWithCommand builds a pool whose workers run the command newCmd
// returns, so that tests can supervise misbehaving processes.
func NewPoolWithCommand(newCmd func(Config) (*exec.Cmd, error), cfg Config, log hclog.Logger) *Pool {
	return newPool(newCmd, cfg, log)
}

// WorkerArgs exposes denoArgs, for tests that start a worker by hand.
var WorkerArgs = denoArgs

// WorkerEnv exposes workerEnv.
var WorkerEnv = workerEnv

// ParseEvent exposes the protocol parser to fuzzing.
func ParseEvent(line []byte) error {
	_, err := parseEvent(line)
	return err
}
