package resp

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"

	"github.com/tidwall/redcon"
)

// Replies that refuse a connection when it is accepted, worded as Redis 7
// words them. They answer no command, so they are not error replies to be
// counted by kind: the refusal counts as a rejected connection.
const (
	errMaxClients = "ERR max number of clients reached"
	errProtected  = "DENIED bucketd is running in protected mode: no password is set (--requirepass) and this client is not on a loopback address. " +
		"Set a password with --requirepass, or, if every host that can reach this port is trusted, start bucketd with --protected-mode=false."
)

// passwordCheck compares passwords in constant time. Hashing first makes the
// comparison independent of the lengths too.
type passwordCheck struct {
	set  bool
	hash [sha256.Size]byte
}

func newPasswordCheck(password string) passwordCheck {
	if password == "" {
		return passwordCheck{}
	}
	return passwordCheck{set: true, hash: sha256.Sum256([]byte(password))}
}

// ok reports whether user and password may log in. Like Redis's default
// user, the only user is "default"; with no password set it accepts any
// password.
func (p passwordCheck) ok(user, password []byte) bool {
	if user != nil && string(user) != "default" {
		return false
	}
	if !p.set {
		return true
	}
	h := sha256.Sum256(password)
	return subtle.ConstantTimeCompare(h[:], p.hash[:]) == 1
}

// cmdAuth answers AUTH password and AUTH username password.
func (s *Server) cmdAuth(c redcon.Conn, sess *session, args [][]byte) *errorReply {
	var user, pass []byte
	if len(args) == 3 {
		user, pass = args[1], args[2]
	} else {
		if !s.password.set {
			return errNoPasswordSet
		}
		pass = args[1]
	}
	if !s.password.ok(user, pass) {
		return errWrongPass
	}
	sess.authed = true
	c.WriteString("OK")
	return nil
}

// refusal returns the reply that turns a new client from remote away, or
// "" to admit it: --max-clients and protected mode. It only reads
// counters, so the accept goroutine can call it (see admit).
func (s *Server) refusal(remote net.Addr) string {
	if s.cfg.MaxClients > 0 && s.n.connected.Load() >= int64(s.cfg.MaxClients) {
		return errMaxClients
	}
	if s.cfg.ProtectedMode && !s.password.set && !isLoopbackAddr(remote) {
		return errProtected
	}
	return ""
}

func isLoopbackAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}
