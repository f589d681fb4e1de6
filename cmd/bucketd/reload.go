package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/resp"
)

// reloader applies a new configuration file on SIGHUP or CONFIG RELOAD:
// policies and the log level change live; a broken file leaves everything
// as it was.
type reloader struct {
	mu      sync.Mutex
	current config.Config // guarded by mu
	file    string        // the config file, "" without one; never changes
	srv     *resp.Server
	level   *slog.LevelVar
	logger  *slog.Logger
	getenv  func(string) string
	startup *startup // the signals of the start-up, ended by onSIGHUP; nil: none
}

// reload is apply for callers that need only whether it worked: SIGHUP,
// and CONFIG RELOAD through resp.Config.Reload.
func (r *reloader) reload() error {
	_, err := r.apply()
	return err
}

// apply reads the config file and the environment again and applies what
// changes live (policies, the log level), logging the outcome. It returns
// the names of the changed settings that take effect only after a restart,
// in --help order (nil when there are none), so that a caller such as
// CONFIG RELOAD can tell the operator; on error nothing changed and the
// list is nil. Until the restart, every later apply reports those settings
// again.
func (r *reloader) apply() (restart []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, restart, err := r.current.Reload(r.getenv)
	if err != nil {
		r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err)
		return nil, err
	}
	r.srv.SetPolicies(next.Policies)
	r.level.Set(next.LogLevel)
	r.current = next
	r.logger.Info("configuration reloaded", "file", next.File, "policies", len(next.Policies))
	if len(restart) > 0 {
		r.logger.Warn("some changed settings take effect only after a restart", "settings", strings.Join(restart, ","))
	}
	return restart, nil
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
