package command

import (
	"strconv"
	"strings"
	"time"
)

// HELP subcommands, as Redis writes them (addReplyHelp): an array of
// simple strings, a first line naming the command, the subcommands bucketd
// answers, and HELP itself.

var (
	clientHelp = []string{
		"CACHING (YES|NO)",
		"    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
		"GETREDIR",
		"    Return the client ID we are redirecting to when tracking is enabled.",
		"GETNAME",
		"    Return the name of the current connection.",
		"ID",
		"    Return the ID of the current connection.",
		"INFO",
		"    Return information about the current client connection.",
		"KILL <ip:port>",
		"    Kill connection made from <ip:port>.",
		"KILL <option> <value> [<option> <value> [...]]",
		"    Kill connections. Options are:",
		"    * ADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made from the specified address",
		"    * LADDR (<ip:port>|<unixsocket>:0)",
		"      Kill connections made to specified local address",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
		"      Kill connections by type.",
		"    * USER <username>",
		"      Kill connections authenticated by <username>.",
		"    * SKIPME (YES|NO)",
		"      Skip killing current connection (default: yes).",
		"    * ID <client-id>",
		"      Kill connections by client id.",
		"LIST [options ...]",
		"    Return information about client connections. Options:",
		"    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
		"      Return clients of specified type.",
		"    * ID <client-id> [<client-id> ...]",
		"      Return clients of specified IDs only.",
		"NO-EVICT (ON|OFF)",
		"    Accepted; bucketd never evicts clients.",
		"NO-TOUCH (ON|OFF)",
		"    Accepted; bucketd keeps no key access times.",
		"SETINFO <option> <value>",
		"    Set client meta attr. Options are:",
		"    * LIB-NAME: the client lib name.",
		"    * LIB-VER: the client lib version.",
		"SETNAME <name>",
		"    Assign the name <name> to the current connection.",
		"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
		"         [OPTIN] [OPTOUT] [NOLOOP]",
		"    Control server assisted client side caching.",
		"TRACKINGINFO",
		"    Report tracking status for the current connection.",
	}
	commandHelp = []string{
		"(no subcommand)",
		"    Return details about all bucketd commands.",
		"COUNT",
		"    Return the total number of commands in this bucketd server.",
		"LIST",
		"    Return a list of all commands in this bucketd server.",
		"INFO [<command-name> ...]",
		"    Return details about multiple bucketd commands.",
		"    If no command names are given, documentation details for all",
		"    commands are returned.",
		"DOCS [<command-name> ...]",
		"    Return documentation details about multiple bucketd commands.",
		"    If no command names are given, documentation details for all",
		"    commands are returned.",
	}
	configHelp = []string{
		"GET <pattern>",
		"    Return parameters matching the glob-like <pattern> and their values.",
		"RELOAD",
		"    Reload the --config file, as SIGHUP does: policies, the log level and the slowlog settings.",
	}
	slowlogHelp = []string{
		"GET [<count>]",
		"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
		"    Entries are made of:",
		"    id, timestamp, time in microseconds, arguments array, client IP and port,",
		"    client name",
		"LEN",
		"    Return the length of the slowlog.",
		"RESET",
		"    Reset the slowlog.",
	}
)

// writeHelp writes a HELP reply for the command args[0] names.
func (s *session) writeHelp(args [][]byte, lines []string) {
	s.w.Array(len(lines) + 3)
	s.w.String(strings.ToUpper(string(args[0])) + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, l := range lines {
		s.w.String(l)
	}
	s.w.String("HELP")
	s.w.String("    Print this help.")
}

func cmdClientHelp(s *session, args [][]byte) *errorReply {
	s.writeHelp(args, clientHelp)
	return nil
}

func cmdCommandHelp(s *session, args [][]byte) *errorReply {
	s.writeHelp(args, commandHelp)
	return nil
}

func cmdConfigHelp(s *session, args [][]byte) *errorReply {
	s.writeHelp(args, configHelp)
	return nil
}

func cmdSlowlogHelp(s *session, args [][]byte) *errorReply {
	s.writeHelp(args, slowlogHelp)
	return nil
}

// cmdTime answers TIME: the Unix time as two bulk strings, seconds and
// microseconds, as Redis does.
func cmdTime(s *session, args [][]byte) *errorReply {
	now := time.Now()
	s.w.Array(2)
	s.w.BulkString(strconv.FormatInt(now.Unix(), 10))
	s.w.BulkString(strconv.Itoa(now.Nanosecond() / 1000))
	return nil
}
