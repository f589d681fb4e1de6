package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	gubernator "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

// runPeer is the peer subcommand: one Gubernator daemon on --grpc with the
// static peer list --peers (gRPC addresses, its own among them), until its
// standard input closes or it gets SIGTERM or SIGINT. It prints "ready"
// on standard output once it serves and knows its peers.
func runPeer(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gubernator-bench peer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc", "", "gRPC `host:port` to listen on and advertise")
	peerList := fs.String("peers", "", "gRPC addresses of every peer, comma-separated, this one included")
	syncWait := fs.Duration("global-sync-wait", 0, "Gubernator's GlobalSyncWait (0: its default, 100ms)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*grpcAddr)
	if err != nil {
		return fmt.Errorf("peer: --grpc %q: %w", *grpcAddr, err)
	}
	var peers []gubernator.PeerInfo
	own := false
	for _, a := range strings.Split(*peerList, ",") {
		peers = append(peers, gubernator.PeerInfo{GRPCAddress: a})
		own = own || a == *grpcAddr
	}
	if !own {
		return fmt.Errorf("peer: --peers %q does not hold --grpc %q", *peerList, *grpcAddr)
	}

	log := logrus.New()
	log.SetOutput(stderr)
	log.SetLevel(logrus.ErrorLevel) // "Discovery type is none" is a warning
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		GRPCListenAddress: *grpcAddr,
		HTTPListenAddress: net.JoinHostPort(host, "0"),
		AdvertiseAddress:  *grpcAddr,
		InstanceID:        *grpcAddr,
		PeerDiscoveryType: "none",
		Logger:            log.WithField("instance", *grpcAddr),
		Behaviors:         gubernator.BehaviorConfig{GlobalSyncWait: *syncWait},
	})
	if err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	defer d.Close()
	d.SetPeers(peers)
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return fmt.Errorf("peer: %w", err)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // returns when the driver closes the pipe or exits
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	return nil
}

// peerProc is a peer subprocess started by the driver.
type peerProc struct {
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startPeers starts one peer process per address, each knowing all of
// them, and waits until every one says ready.
func startPeers(addrs []string, syncWait time.Duration, stderr io.Writer) ([]*peerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	var procs []*peerProc
	fail := func(err error) ([]*peerProc, error) {
		stopPeers(procs)
		return nil, err
	}
	for _, a := range addrs {
		cmd := exec.Command(exe, "peer", "--grpc", a, "--peers", strings.Join(addrs, ","),
			"--global-sync-wait", syncWait.String())
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return fail(fmt.Errorf("peers: %w", err))
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return fail(fmt.Errorf("peers: %w", err))
		}
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("peers: start %s: %w", a, err))
		}
		p := &peerProc{addr: a, cmd: cmd, stdin: in}
		procs = append(procs, p)
		ready := make(chan error, 1)
		go func() {
			line, err := bufio.NewReader(out).ReadString('\n')
			if err == nil && strings.TrimSpace(line) != "ready" {
				err = fmt.Errorf("said %q", line)
			}
			ready <- err
			_, _ = io.Copy(io.Discard, out) // nothing more is expected
		}()
		select {
		case err := <-ready:
			if err != nil {
				return fail(fmt.Errorf("peers: %s did not start: %w", a, err))
			}
		case <-time.After(15 * time.Second):
			return fail(fmt.Errorf("peers: %s not ready after 15 s", a))
		}
	}
	return procs, nil
}

// stopPeers closes each peer's standard input, which makes it exit, and
// waits for it (SIGKILL after 5 s).
func stopPeers(procs []*peerProc) {
	for _, p := range procs {
		_ = p.stdin.Close() // the peer's signal to exit
	}
	for _, p := range procs {
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill() // it would not stop
			<-done
		}
	}
}

// freeAddrs picks a free TCP port on each host (it may be taken again
// before it is used; the peers fail to start then).
func freeAddrs(hosts []string) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var addrs []string
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port on %s: %w", h, err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	if len(addrs) == 0 {
		return nil, errors.New("free port: no hosts")
	}
	return addrs, nil
}
