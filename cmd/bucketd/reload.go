package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
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

func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, restart, err := r.current.Reload(r.getenv)
	if err == nil {
		err = servablePolicies(next.File, next.Policies)
	}
	if err != nil {
		r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err)
		return err
	}
	r.srv.SetPolicies(respPolicies(next.Policies))
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

// respPolicies converts the policies for the protocol, which takes one
// limit per policy; servablePolicies has refused the others.
func respPolicies(in map[string]config.Policy) map[string]resp.Policy {
	out := make(map[string]resp.Policy, len(in))
	for name, p := range in {
		out[name] = resp.Policy{Capacity: p.Limits[0].Capacity, Rate: p.Limits[0].Rate, Prefix: p.Prefix}
	}
	return out
}

// servablePolicies refuses the policies the configuration accepts but the
// protocol does not serve yet: several limits, and shadow. resp.Policy
// holds one limit and no shadow flag, and checking only the first limit,
// or denying for a shadow policy, would be silently wrong. The first such
// policy by name is reported, so the error is the same on every run.
func servablePolicies(file string, in map[string]config.Policy) error {
	for _, name := range slices.Sorted(maps.Keys(in)) {
		switch p := in[name]; {
		case p.Multi():
			return fmt.Errorf("config file %s: policy %q has %d limits, and this bucketd serves policies of one limit only: "+
				"keep one limit (capacity and rate) in it", file, name, len(p.Limits))
		case p.Shadow:
			return fmt.Errorf("config file %s: policy %q is a shadow policy, and this bucketd does not serve shadow policies yet: "+
				"drop shadow: true from it", file, name)
		}
	}
	return nil
}
