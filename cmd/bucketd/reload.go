package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/bucketd/bucketd/internal/config"
	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/resp"
)

// reloader applies a new configuration file on SIGHUP or CONFIG RELOAD:
// policies and the log level change live; a broken file leaves everything
// as it was.
//
// Its log lines are written at most once a second each, with the count of
// the reloads they stand for (ratelog.Line): a client may send thousands
// of CONFIG RELOAD a second, and the log is never one line per command.
type reloader struct {
	mu      sync.Mutex
	current config.Config // guarded by mu
	file    string        // the config file, "" without one; never changes
	srv     *resp.Server
	level   *slog.LevelVar
	logger  *slog.Logger
	getenv  func(string) string
	startup *startup // the signals of the start-up, ended by onSIGHUP; nil: none

	reloaded, restart, failed ratelog.Line
}

func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, restart, err := r.current.Reload(r.getenv)
	if err != nil {
		r.failed.Log(func(suppressed int64) {
			r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err,
				"suppressed", suppressed)
		})
		return err
	}
	r.srv.SetPolicies(next.Policies)
	r.level.Set(next.LogLevel)
	r.current = next
	r.reloaded.Log(func(suppressed int64) {
		r.logger.Info("configuration reloaded", "file", next.File, "policies", len(next.Policies), "suppressed", suppressed)
	})
	if len(restart) > 0 {
		r.restart.Log(func(suppressed int64) {
			r.logger.Warn("some changed settings take effect only after a restart", "settings", strings.Join(restart, ","),
				"suppressed", suppressed)
		})
	}
	return nil
}

// flushLog writes the lines held back by the rate limit; at shutdown,
// once no reload can run any more.
func (r *reloader) flushLog() {
	for _, l := range []*ratelog.Line{&r.failed, &r.reloaded, &r.restart} {
		l.Flush()
	}
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
