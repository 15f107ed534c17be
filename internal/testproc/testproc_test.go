package testproc

import (
	"io"
	"os/exec"
	"testing"
)

func TestStartPipedTalksToTheChild(t *testing.T) {
	cmd := exec.Command("cat")
	stdin, stdout := StartPiped(t, cmd)
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	got, err := io.ReadAll(stdout)
	if err != nil || string(got) != "hello\n" {
		t.Errorf("cat gave back %q, %v", got, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("cat: %v", err)
	}
}
