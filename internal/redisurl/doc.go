// Package redisurl reads the Redis Sentinel URLs that --replicate and
// --store take besides go-redis's own redis:// and rediss:// URLs:
//
//	redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/master[?db=N&...]
//
// The hosts are the Sentinels (port 26379 when left out), which tell the
// client where the master named in the path is now, so that it follows
// that master through a failover. The user and password are the master's (its requirepass or ACL
// user), as in a redis:// URL. The query takes db (the database number,
// 0 by default), sentinel_username and sentinel_password (for Sentinels
// that have a requirepass of their own) and go-redis's connection options
// (dial_timeout, pool_size and the like, as redis.ParseFailoverURL reads
// them).
//
// TLS is not supported through Sentinel (there is no rediss-sentinel://).
// The package parses only; bucketd's two Redis clients set their own
// options on the result (replica.Dial, redisstore.FailoverOptions).
//
// It imports no other bucketd package: internal/config uses it to check
// the URLs at start, and internal/replica and internal/redisstore to build
// their clients, so the form is read the same way by all three.
package redisurl
