package pyodidehost_test

import "os"

// interruptSignal: Windows delivers no signal to another process; the
// supervisor kills the worker instead (supervisor/proc_windows.go).
var interruptSignal = os.Interrupt
