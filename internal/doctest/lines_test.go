package doctest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// outputTimeout bounds the wait for a reply; bucketd answers in
// milliseconds, so a reply this late is missing.
const outputTimeout = 20 * time.Second

// lineProc is a process fed on stdin whose output (stdout and stderr
// together) is collected as it comes, so the test can wait until a given
// number of lines has arrived.
type lineProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{} // signalled on every read
	done chan struct{} // closed when the output has ended
}

func startLines(cmd *exec.Cmd) (*lineProc, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	err = cmd.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		return nil, err
	}
	p := &lineProc{cmd: cmd, in: in, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer outR.Close()
		b := make([]byte, 4096)
		for {
			n, err := outR.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:n])
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return p, nil
}

func (p *lineProc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

func (p *lineProc) send(line string) error {
	_, err := io.WriteString(p.in, line+"\n")
	return err
}

// waitFor waits until n lines of output have arrived.
func (p *lineProc) waitFor(n int) error {
	deadline := time.After(outputTimeout)
	for strings.Count(p.text(), "\n") < n {
		select {
		case <-p.more:
		case <-p.done:
			return fmt.Errorf("the output ended before the %d lines the doc shows", n)
		case <-deadline:
			return fmt.Errorf("waited %v for the %d lines the doc shows", outputTimeout, n)
		}
	}
	return nil
}

// finish closes stdin and returns all the output once the process ends.
func (p *lineProc) finish() (string, error) {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(outputTimeout):
		p.stop()
		return p.text(), fmt.Errorf("%s did not end within %v after its input ended", p.cmd.Path, outputTimeout)
	}
	p.cmd.Wait()
	return p.text(), nil
}

// stop kills the process if it still runs.
func (p *lineProc) stop() {
	select {
	case <-p.done:
	default:
		p.in.Close()
		p.cmd.Process.Kill()
		<-p.done
		p.cmd.Wait()
	}
}
