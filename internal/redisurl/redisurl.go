package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SentinelScheme is the scheme of a Sentinel URL.
const SentinelScheme = "redis-sentinel"

// DefaultSentinelPort is the port of a Sentinel given without one.
const DefaultSentinelPort = "26379"

// Example is a Sentinel URL for error messages and help.
const Example = "redis-sentinel://:password@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster"

var errBadURL = fmt.Errorf("not a valid URL (write %%, @, /, ? and # in a password as %%25, %%40, %%2F, %%3F and %%23): use %s", Example)

// IsSentinel reports whether v is a Sentinel URL (its scheme is
// redis-sentinel, in any case), valid or not.
func IsSentinel(v string) bool {
	scheme, _, ok := strings.Cut(v, "://")
	return ok && strings.EqualFold(scheme, SentinelScheme)
}

// reserved are query parameters of redis.ParseFailoverURL that a Sentinel
// URL spells elsewhere, with where.
var reserved = map[string]string{
	"master_name": "the master's name is the URL's path: /mymaster",
	"addr":        "list every Sentinel as host:port before the path, separated by commas",
	"username":    "the master's user goes before the hosts: redis-sentinel://user:password@host:26379/mymaster",
	"password":    "the master's password goes before the hosts: redis-sentinel://:password@host:26379/mymaster",
}

// Failover parses the Sentinel URL v into options for
// redis.NewFailoverClient. Its errors say what to write instead and never
// contain the URL (which may hold a password).
func Failover(v string) (*redis.FailoverOptions, error) {
	if !IsSentinel(v) {
		return nil, fmt.Errorf("not a Sentinel URL: use %s", Example)
	}
	rest := v[len(SentinelScheme)+len("://"):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if path, _, _ := strings.Cut(tail, "?"); strings.Contains(path, "@") {
		return nil, errBadURL // a password with an unescaped / in it
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	addrs, err := sentinelAddrs(hosts)
	if err != nil {
		return nil, err
	}
	// The hosts replaced by one placeholder, url.Parse reads the rest (the
	// escapes of the password, the path and the query) as in any URL.
	u, err := url.Parse("redis://" + userinfo + "sentinels" + tail)
	if err != nil || u.Fragment != "" {
		return nil, errBadURL
	}
	master := strings.TrimPrefix(u.Path, "/")
	if master == "" || strings.Contains(master, "/") {
		return nil, fmt.Errorf("the path of a Sentinel URL is the master's name, as in sentinel.conf's \"sentinel monitor\": use %s", Example)
	}
	q := u.Query()
	for name, where := range reserved {
		if q.Has(name) {
			return nil, fmt.Errorf("no %s parameter in a Sentinel URL: %s", name, where)
		}
	}
	if db := q.Get("db"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return nil, errors.New("db is the database number: use db=0, db=1 and so on, or leave it out")
		}
	}
	return parse(u, q, master, addrs)
}

// parse hands the URL to redis.ParseFailoverURL in the form it reads: the
// first Sentinel as the host with the Sentinels' credentials, the others
// as addr parameters, the master's name and credentials as parameters.
func parse(u *url.URL, q url.Values, master string, addrs []string) (*redis.FailoverOptions, error) {
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	if u.User != nil {
		if name := u.User.Username(); name != "" {
			q.Set("username", name)
		}
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	g := url.URL{Scheme: "redis", Host: addrs[0], RawQuery: q.Encode()}
	switch {
	case sentinelUser != "":
		g.User = url.UserPassword(sentinelUser, sentinelPass)
	case sentinelPass != "":
		g.User = url.UserPassword("", sentinelPass)
	}
	o, err := redis.ParseFailoverURL(g.String())
	if err != nil {
		// go-redis's errors name an option or a value, never the password.
		return nil, fmt.Errorf("%w (the query takes db, sentinel_username, sentinel_password and go-redis's connection options such as dial_timeout)", err)
	}
	return o, nil
}

// sentinelAddrs splits the comma-separated Sentinels, giving each its port.
func sentinelAddrs(hosts string) ([]string, error) {
	var addrs []string
	for h := range strings.SplitSeq(hosts, ",") {
		h = strings.TrimSpace(h)
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// Without a port: a name, an IPv4 address or a bracketed IPv6 one.
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), DefaultSentinelPort
		}
		n, perr := strconv.Atoi(port)
		if host == "" || strings.ContainsAny(host, "[]/ ") || perr != nil || n < 1 || n > 65535 || port[0] == '+' {
			return nil, fmt.Errorf("sentinel %q is not host:port: list the Sentinels separated by commas, as in %s", h, Example)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}
