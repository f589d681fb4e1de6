package command

import (
	"crypto/sha256"
	"crypto/subtle"
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
func cmdAuth(s *session, args [][]byte) *errorReply {
	var user, pass []byte
	if len(args) == 3 {
		user, pass = args[1], args[2]
	} else {
		if !s.e.password.set {
			return errNoPasswordSet
		}
		pass = args[1]
	}
	if !s.e.password.ok(user, pass) {
		return errWrongPass
	}
	s.authenticate()
	s.w.String("OK")
	return nil
}
