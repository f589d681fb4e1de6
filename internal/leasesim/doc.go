// Package leasesim runs lease mode's protocol for many instances against
// one Redis on a simulated clock, to find out whether the design keeps its
// promise at a scale and under faults one machine cannot reproduce: no
// window of any length w ever sees more grants than capacity + rate*w,
// over all instances, whatever the network, the clocks and crashes do.
//
// What runs is the real instance logic: internal/lease's Policy and Entry,
// driven the way internal/shard (lease.go) and internal/leasestore drive
// them: Take on each client call; a lease call to Redis on Ask, a plain
// acquire on Plain; Apply when the reply comes within the timeout and Fail
// when it does not; a renewal when Take says so; a sweep every 10 ms that
// gives idle leases back and forgets empty entries. What Redis does is
// internal/bucket's Stored, the Go mirror of the script. Only the world
// around them is simulated:
//
//   - time: discrete events in microseconds of the true clock, which is
//     Redis's; each instance reads its own clock, which may run at another
//     rate (Config.ClockSkew, Config.ClockRate);
//   - the network: a random delay per leg, sometimes long, and loss of
//     requests and of replies; a request that arrives after its sender
//     timed out is still run by Redis;
//   - instances that crash (kill -9: nothing is given back, their records
//     lapse) and instances that join in their place;
//   - demand: Poisson arrivals per key, spread over the instances evenly,
//     by Zipf, or in bursts, at a level relative to the key's rate.
//
// The checker (checker.go) records every grant at its true time, the
// instant Redis decided it or the instance spent the lease, and measures
// the busiest windows of 100 ms and 1 s against the bound, and the grants
// against an ideal single bucket fed the same demand.
//
// Everything is deterministic for a Config, seed included: events at the
// same instant run in the order they were scheduled, and every random draw
// comes from one generator.
package leasesim
