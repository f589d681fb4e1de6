package doctest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// commandTimeout bounds one shell command; doc commands take milliseconds
// (or the seconds of a sleep), so one that takes this long is hanging.
const commandTimeout = 30 * time.Second

// driver is the bash loop a session's shell commands run in: one bash for
// the whole session, so variables (SHA=…) carry from block to block. It
// reads NUL-terminated commands from fd 3, runs each with stdin from
// /dev/null and stderr on stdout (as a terminal shows both), and ends each
// one's output with a marker line carrying its exit status. Its output is
// a pseudo-terminal (see openPTY).
//
// Where nc is not installed, a stand-in with bash's /dev/tcp does what
// the docs use nc for: send stdin, print what comes back until the server
// closes the connection.
const driver = `exec 2>&1 </dev/null
if ! command -v nc >/dev/null; then
	nc() {
		exec 9<>"/dev/tcp/$1/$2" || return 1
		cat >&9
		cat <&9
		exec 9<&-
	}
fi
while IFS= read -r -d '' doctest_cmd <&3; do
	eval "$doctest_cmd"
	printf '\n\036doctest-end %d\n' "$?"
done
`

const endMarker = "\x1edoctest-end "

// shell is a running driver.
type shell struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     io.Closer
	results chan shellResult
}

type shellResult struct {
	out    string
	status int
}

// startShell starts bash in dir with env.
func startShell(dir string, env []string) (*shell, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", driver)
	cmd.Dir = dir
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := openPTY()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = outW
	err = cmd.Start()
	r.Close()
	outW.Close()
	if err != nil {
		w.Close()
		outR.Close()
		return nil, err
	}
	s := &shell{cmd: cmd, in: w, out: outR, results: make(chan shellResult, 1)}
	go s.read(outR)
	return s, nil
}

// read splits the driver's output at the marker lines.
func (s *shell) read(out io.Reader) {
	br := bufio.NewReader(out)
	var chunk strings.Builder
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, endMarker) {
			status, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, endMarker)))
			text := chunk.String()
			s.results <- shellResult{out: text[:max(len(text)-1, 0)], status: status} // the marker's own leading newline
			chunk.Reset()
		} else {
			chunk.WriteString(line)
		}
		if err != nil {
			close(s.results)
			return
		}
	}
}

// run runs one command and returns its output and exit status.
func (s *shell) run(command string) (string, int, error) {
	if _, err := io.WriteString(s.in, command+"\x00"); err != nil {
		return "", 0, fmt.Errorf("writing to bash: %v", err)
	}
	select {
	case r, ok := <-s.results:
		if !ok {
			return "", 0, fmt.Errorf("bash exited while running %q", command)
		}
		return r.out, r.status, nil
	case <-time.After(commandTimeout):
		s.kill()
		return "", 0, fmt.Errorf("%q did not finish within %v", command, commandTimeout)
	}
}

// kill ends bash and everything it started.
func (s *shell) kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
}

// close ends the loop and waits for bash; one that does not end is
// killed with its process group (while bash lives, the group id is ours).
func (s *shell) close() {
	s.in.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		s.kill()
		<-done
	}
	s.out.Close()
}
