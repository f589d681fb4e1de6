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
	"github.com/bucketd/bucketd/internal/ratelog"
	"github.com/bucketd/bucketd/internal/resp/command"
)

// reloader applies a new configuration file on SIGHUP or CONFIG RELOAD:
// policies and the log level change live; a broken file leaves everything
// as it was, and so does a file that config refuses as caught in the
// middle of a rewrite (config.Config.Reload).
//
// Its log lines are written at most once a second each, with the count of
// the reloads they stand for (ratelog.Line): a client may send thousands
// of CONFIG RELOAD a second, and the log is never one line per command.
type reloader struct {
	mu      sync.Mutex
	current config.Config // guarded by mu
	file    string        // the config file, "" without one; never changes
	cmds    *command.Engine
	level   *slog.LevelVar
	logger  *slog.Logger
	getenv  func(string) string
	startup *startup // the signals of the start-up, ended by onSIGHUP; nil: none

	// decisions returns the decisions counted so far under each policy in
	// force, by name (see policyDecisions); nil: none are known. used is
	// what it returned at the last reload (or the start), guarded by mu:
	// a policy whose count grew since was used since that reload.
	decisions func() map[string]int64
	used      map[string]int64

	reloaded, restart, failed, removedInUse ratelog.Line
}

// policyDecisions is the reloader's decisions for cmds: the counters
// behind bucketd_decisions_total{policy}, summed over the results.
func policyDecisions(cmds *command.Engine) func() map[string]int64 {
	return func() map[string]int64 {
		st := cmds.Stats().Decisions
		m := make(map[string]int64, len(st))
		for _, p := range st {
			if p.Name != "" {
				m[p.Name] = p.Allowed + p.Denied + p.ShadowDenied
			}
		}
		return m
	}
}

// markUse records the decisions now as the start of the next period of
// use; call it with mu held, or before the reloader is shared.
func (r *reloader) markUse() {
	if r.decisions != nil {
		r.used = r.decisions()
	}
}

// reload is apply for callers that need only whether it worked: SIGHUP.
func (r *reloader) reload() error {
	_, err := r.apply()
	return err
}

// apply reads the config file and the environment again and applies what
// changes live (policies, the log level, the slowlog settings), logging the outcome. It returns
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
		r.failed.Log(func(suppressed int64) {
			r.logger.Error("configuration reload failed; the running configuration stays", "file", r.current.File, "err", err,
				"suppressed", suppressed)
		})
		return nil, err
	}
	r.warnRemoved(next)
	r.cmds.SetPolicies(next.Policies)
	setSlowlog(r.cmds, next)
	r.level.Set(next.LogLevel)
	r.current = next
	r.markUse()
	r.reloaded.Log(func(suppressed int64) {
		r.logger.Info("configuration reloaded", "file", next.File, "policies", len(next.Policies), "suppressed", suppressed)
	})
	if len(restart) > 0 {
		r.restart.Log(func(suppressed int64) {
			r.logger.Warn("some changed settings take effect only after a restart", "settings", strings.Join(restart, ","),
				"suppressed", suppressed)
		})
	}
	return restart, nil
}

// maxNames bounds the policy names one log line lists.
const maxNames = 20

// warnRemoved logs at WARN when next removes policies that calls used
// since the last reload, or removes every policy: calls naming them get
// ERR unknown policy from now on, which the operator should know of.
func (r *reloader) warnRemoved(next config.Config) {
	var removed, inUse []string
	now := map[string]int64(nil)
	if r.decisions != nil {
		now = r.decisions()
	}
	for _, name := range slices.Sorted(maps.Keys(r.current.Policies)) {
		if _, kept := next.Policies[name]; kept {
			continue
		}
		removed = append(removed, name)
		if now[name] > r.used[name] {
			inUse = append(inUse, name)
		}
	}
	if len(inUse) == 0 && (len(removed) == 0 || len(next.Policies) > 0) {
		return
	}
	r.removedInUse.Log(func(suppressed int64) {
		r.logger.Warn("reload removed policies in use; calls naming them now get ERR unknown policy",
			"file", next.File, "removed", listNames(removed), "used", listNames(inUse), "policies", len(next.Policies),
			"suppressed", suppressed)
	})
}

// listNames joins names for a log line, the first maxNames of them.
func listNames(names []string) string {
	if len(names) > maxNames {
		return strings.Join(names[:maxNames], ",") + fmt.Sprintf(" and %d more", len(names)-maxNames)
	}
	return strings.Join(names, ",")
}

// flushLog writes the lines held back by the rate limit; at shutdown,
// once no reload can run any more.
func (r *reloader) flushLog() {
	for _, l := range []*ratelog.Line{&r.failed, &r.removedInUse, &r.reloaded, &r.restart} {
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
