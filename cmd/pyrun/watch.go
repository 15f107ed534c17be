package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
)

// reloadDelay is how long the config folder must be quiet before the file
// is read again: editors save in several steps (write a temporary file,
// rename it over the old one, change its mode).
const reloadDelay = 150 * time.Millisecond

// configWatcher calls apply when a file's content changes (the config
// file, the token file). It watches the file's folder, not the file, so
// that a save by rename (most editors, and the symlink swaps of mounted
// config maps) is seen too.
type configWatcher struct {
	w    *fsnotify.Watcher
	done chan struct{}
}

func watchConfig(path string, log hclog.Logger, apply func()) (*configWatcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("watch config: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch config: %w", err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch config folder: %w", err)
	}
	c := &configWatcher{w: w, done: make(chan struct{})}
	last, _ := os.ReadFile(abs)
	go func() {
		defer close(c.done)
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case _, ok := <-w.Events:
				if !ok {
					timer.Stop()
					return
				}
				// Any change in the folder may be the file's (a rename onto it,
				// a symlink swap): look at the content once things are quiet.
				timer.Reset(reloadDelay)
			case err, ok := <-w.Errors:
				if !ok {
					timer.Stop()
					return
				}
				log.Warn("watching for changes", "file", abs, "error", err)
			case <-timer.C:
				b, err := os.ReadFile(abs)
				if err == nil && bytes.Equal(b, last) {
					continue
				}
				if err != nil && last == nil {
					continue // still missing
				}
				last = b
				log.Debug("file changed", "file", abs)
				apply()
			}
		}
	}()
	return c, nil
}

// Close stops watching; it returns once no apply is running or will run.
func (c *configWatcher) Close() error {
	err := c.w.Close()
	<-c.done
	return err
}
