package oswall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Access rights of Landlock rules.
const (
	accessRead = ll.AccessFSReadFile | ll.AccessFSReadDir
	accessExec = ll.AccessFSReadFile | ll.AccessFSExecute
	// accessWrite: everything but executing, device ioctls, making
	// devices, and connecting to UNIX sockets (refused by seccomp anyway).
	accessWrite = accessRead | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSRemoveDir |
		ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSym |
		ll.AccessFSMakeFifo | ll.AccessFSMakeSock | ll.AccessFSRefer
	// fileRights are those that apply to a file; the others (reading a
	// folder, making and removing in it) only to folders.
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// landlockConfig is what the ruleset of p restricts: every file system
// right go-landlock knows, TCP bind always (a worker serves nothing), TCP
// connect and (on kernels with ABI 10) UDP without the network, and
// signals and abstract UNIX sockets to anything outside the process.
// Best effort: a right this kernel's Landlock lacks is left out, the rest
// is enforced.
func landlockConfig(p Policy) landlock.Config {
	net := landlock.AccessNetSet(ll.AccessNetBindTCP)
	if !p.Network {
		net = landlock.V11.HandledAccessNet // TCP and UDP, as far as the kernel knows them
	}
	return landlock.Config{
		HandledAccessFS:  landlock.V11.HandledAccessFS,
		HandledAccessNet: net,
		Scoped:           landlock.V11.Scoped,
	}.BestEffort()
}

// landlockRules are the rules granting p's paths, each with the rights
// that apply to what it is (a file or a folder). Paths that do not exist
// are left out.
func landlockRules(p Policy) ([]landlock.Rule, error) {
	var rules []landlock.Rule
	add := func(paths []string, access uint64) error {
		for _, path := range paths {
			st, err := os.Stat(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			a := access
			if !st.IsDir() {
				a &= fileRights
			}
			rules = append(rules, landlock.PathAccess(landlock.AccessFSSet(a), path).IgnoreIfMissing())
		}
		return nil
	}
	if err := add(p.Read, accessRead); err != nil {
		return nil, err
	}
	if err := add(p.Write, accessWrite); err != nil {
		return nil, err
	}
	if err := add(p.Exec, accessExec); err != nil {
		return nil, err
	}
	// Its own process's files (/proc/self is /proc/<pid>, and the program
	// keeps the launcher's pid): the C library reads /proc/self/maps to
	// find the main thread's stack.
	if err := add([]string{fmt.Sprintf("/proc/%d", os.Getpid())}, accessRead); err != nil {
		return nil, err
	}
	return rules, nil
}

// restrictLandlock enforces p's ruleset on the calling thread, which then
// execs the program (go-landlock's "Case 2": no other thread needs it).
// no_new_privs is set already (applyAll).
func restrictLandlock(p Policy) error {
	if v, err := ll.LandlockGetABIVersion(); err != nil || v < 1 {
		return fmt.Errorf("the kernel offers no Landlock (%v)", err)
	}
	rules, err := landlockRules(p)
	if err != nil {
		return err
	}
	fd, flags, err := landlockConfig(p).NewRulesetFD(rules...)
	if err != nil {
		return err
	}
	if fd < 0 {
		return errors.New("nothing to restrict on this kernel")
	}
	defer unix.Close(fd)
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
