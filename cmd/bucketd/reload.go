package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/resp/command"
)

// reloader applies a new configuration file on SIGHUP or CONFIG RELOAD:
// policies and the log level change live; a broken file leaves everything
// as it was.
type reloader struct {
	mu      sync.Mutex
	current config.Config // guarded by mu
	file    string        // the config file, "" without one; never changes
	cmds    *command.Engine
	level   *slog.LevelVar
	logger  *slog.Logger
	getenv  func(string) string
	startup *startup // the signals of the start-up, ended by onSIGHUP; nil: none
}

func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, restart, err := r.current.Reload(r.getenv)
	if err != nil {
		r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err)
		return err
	}
	r.cmds.SetPolicies(next.Policies)
	r.level.Set(next.LogLevel)
	r.current = next
	r.logger.Info("configuration reloaded", "file", next.File, "policies", len(next.Policies))
	if len(restart) > 0 {
		r.logger.Warn("some changed settings take effect only after a restart", "settings", strings.Join(restart, ","))
	}
	return nil
}

// onSIGHUP reloads on each signal from hup until ctx ends, starting with
// one held during the start-up (see startup).
func (r *reloader) onSIGHUP(ctx context.Context, hup <-chan os.Signal) {
	r.startup.end()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if r.file == "" {
				r.logger.Warn("SIGHUP ignored: no --config file to reload")
				continue
			}
			r.reload() //nolint:errcheck // reload logs its own outcome
		}
	}
}
