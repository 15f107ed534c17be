package procfs

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
)

func TestStatusAndSize(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	rss, err := Status(os.Getpid(), "VmRSS")
	if err != nil || rss < 1<<20 || rss%1024 != 0 {
		t.Errorf("VmRSS of this test = %d, %v; want some MiB, in whole KiB", rss, err)
	}
	if _, err := Size(Path(os.Getpid(), "smaps_rollup"), "Pss"); err != nil {
		t.Errorf("Pss: %v", err)
	}
	if total, err := Size("/proc/meminfo", "MemTotal"); err != nil || total < rss {
		t.Errorf("MemTotal = %d, %v; want more than this test's RSS", total, err)
	}
	if _, err := Status(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a field that is not there read without an error")
	}
	if _, err := Status(-1, "VmRSS"); err == nil {
		t.Error("a process that is not there read without an error")
	}
}

func TestChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if kids := Children(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("children of this test %v, want the sleep %d among them", kids, cmd.Process.Pid)
	}
	if kids := Children(cmd.Process.Pid); len(kids) != 0 {
		t.Errorf("children of sleep: %v, want none", kids)
	}
}
