package check

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	unitPath    = "../systemd/bucketd.service"
	envFilePath = "../systemd/bucketd.env"
	// policiesPath is the example config file, installed as
	// configDir/bucketd.yaml.
	policiesPath = "../systemd/bucketd.yaml"
	configDir    = "/etc/bucketd/" // ConfigurationDirectory=bucketd
	// installedBinary is where the unit expects bucketd.
	installedBinary = "/usr/local/bin/bucketd"
)

// unitDirectives returns the directives of a unit file's section, in
// order, as key and value.
func unitDirectives(t *testing.T, data []byte, section string) [][2]string {
	t.Helper()
	var out [][2]string
	in := false
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			in = line == "["+section+"]"
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not key=value", unitPath, line)
			}
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with
// ExecStart pointed at the bucketd this test built (verify checks that the
// binary exists), and fails on any complaint about it, warnings included
// (an unknown or misspelt directive is only a warning to verify). It also
// keeps the sandboxing: systemd-analyze security must rate the unit's
// exposure 2.0 or lower ("OK") on its 0-10 scale (--threshold counts in
// tenths).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze", "systemd")
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("\nExecStart="+installedBinary+"\n")) {
		t.Fatalf("%s: ExecStart is not %s", unitPath, installedBinary)
	}
	unit := filepath.Join(t.TempDir(), "bucketd.service")
	data = bytes.Replace(data, []byte("ExecStart="+installedBinary), []byte("ExecStart="+binary), 1)
	if err := os.WriteFile(unit, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("bucketd")) {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	} else if len(out) > 0 {
		t.Logf("systemd-analyze verify, about other units:\n%s", out)
	}
	// The check itself: a misspelt directive makes verify talk about the unit.
	bad := filepath.Join(filepath.Dir(unit), "misspelt.service")
	if err := os.WriteFile(bad, bytes.Replace(data, []byte("ProtectSystem="), []byte("ProtectSystm="), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(analyze, "verify", bad).CombinedOutput(); !bytes.Contains(out, []byte("ProtectSystm")) {
		t.Errorf("systemd-analyze verify does not report a misspelt directive:\n%s", out)
	}
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=20", unit).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security --threshold=20 %s: %v\n%s", unitPath, err, out)
	}
	if i := bytes.LastIndex(out, []byte("Overall exposure level")); i >= 0 {
		t.Logf("%s", bytes.TrimSpace(out[i:]))
	}
}

// envFile reads a systemd environment file: KEY=VALUE lines, and the
// commented-out examples (#KEY=VALUE) separately.
func envFile(t *testing.T, path string) (set, examples [][2]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		commented := strings.HasPrefix(line, "#")
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		switch {
		case ok && !strings.ContainsAny(k, " \t") && !commented:
			set = append(set, [2]string{k, v})
		case ok && !strings.ContainsAny(k, " \t"):
			examples = append(examples, [2]string{k, v})
		}
	}
	return set, examples
}

// TestSystemdUnitStarts starts bucketd with the unit's environment and
// the example environment file, as systemd would (the file's settings win
// over the unit's Environment=), with the addresses on free loopback ports,
// the state directory in a temporary one and the policies file a copy of
// deploy/systemd/bucketd.yaml; every variable, the commented-out examples
// included, must be a bucketd setting, TimeoutStopSec must cover the
// shutdown, and the unit's reload (ExecReload's SIGHUP) must apply a
// changed policy.
func TestSystemdUnitStarts(t *testing.T) {
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	var stopTimeout time.Duration
	var reload string
	for _, d := range unitDirectives(t, data, "Service") {
		switch d[0] {
		case "ExecReload":
			reload = d[1]
		case "Environment":
			k, v, _ := strings.Cut(d[1], "=")
			vars[k] = v
		case "TimeoutStopSec":
			if stopTimeout, err = time.ParseDuration(d[1]); err != nil {
				t.Fatalf("TimeoutStopSec %q: %v", d[1], err)
			}
		}
	}
	set, examples := envFile(t, envFilePath)
	for _, kv := range append(set, examples...) {
		if _, ok := envSetting(kv[0]); !ok {
			t.Errorf("%s: %s is no bucketd setting (bucketd --help lists them)", envFilePath, kv[0])
		}
	}
	for _, kv := range set {
		vars[kv[0]] = kv[1]
	}
	addr, metrics := freeAddr(t), freeAddr(t)
	vars["BUCKETD_ADDR"], vars["BUCKETD_METRICS_ADDR"] = addr, metrics
	dataDir := t.TempDir()
	vars["BUCKETD_DATA_DIR"] = dataDir // StateDirectory=bucketd
	checkStopTimeout(t, vars, stopTimeout)
	if want := configDir + filepath.Base(policiesPath); vars["BUCKETD_CONFIG"] != want {
		t.Fatalf("%s: BUCKETD_CONFIG %q, want %s, where the install steps put %s", envFilePath, vars["BUCKETD_CONFIG"], want, policiesPath)
	}
	policies, err := os.ReadFile(policiesPath)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), filepath.Base(policiesPath))
	writeFile(t, config, string(policies))
	vars["BUCKETD_CONFIG"] = config
	if reload != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("ExecReload=%s, want /bin/kill -HUP $MAINPID (bucketd reloads on SIGHUP)", reload)
	}

	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	p := startBucketd(t, nil, env)
	p.serving(t, addr, metrics, vars["BUCKETD_REQUIREPASS"])
	ep := endpoints{addr: addr, metrics: metrics, pass: vars["BUCKETD_REQUIREPASS"]}
	checkPolicyReload(t, ep, config, func(*respConn) {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil { // what ExecReload sends
			t.Fatal(err)
		}
	})
	took := p.stop(t, stopTimeout)
	t.Logf("exit %v after SIGTERM", took.Round(time.Millisecond))
	if files, _ := filepath.Glob(filepath.Join(dataDir, "*.snapshot")); len(files) != 1 {
		t.Errorf("no snapshot in the state directory after the shutdown")
	}
}

// checkStopTimeout: systemd kills bucketd TimeoutStopSec after SIGTERM;
// that must come after --shutdown-timeout and the final snapshot of
// --max-buckets buckets, with 5 s to spare.
func checkStopTimeout(t *testing.T, vars map[string]string, stop time.Duration) {
	t.Helper()
	set := map[string]string{}
	for k, v := range vars {
		if flag, ok := envSetting(k); ok {
			set[flag] = v
		}
	}
	if set["max-buckets"] == "" {
		t.Errorf("%s sets no BUCKETD_MAX_BUCKETS: memory has no bound", envFilePath)
	}
	bound := duration(t, set, "shutdown-timeout", defaultShutdownTimeout) + time.Second +
		time.Duration(integer(t, set, "max-buckets"))*snapshotPerBucket
	if stop < bound+5*time.Second {
		t.Errorf("TimeoutStopSec %v, want at least %v (the shutdown's bound %v, plus 5 s)", stop, bound+5*time.Second, bound)
	}
	t.Logf("shutdown bound %v, TimeoutStopSec %v", bound, stop)
}
