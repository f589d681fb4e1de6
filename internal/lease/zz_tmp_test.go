package lease

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bucketd/bucketd/internal/bucket"
)

func TestTmpCount(t *testing.T) {
	for _, rate := range []float64{172, 345, 690, 2000} {
		p := Policy{Target: 1_000_000, MaxShare: 0.1, TTL: 4_000_000, Margin: 1_000_000, Idle: 2_000_000, RenewBelow: 0.25}
		l := bucket.Limit{Capacity: 100000, Rate: 100000}
		var e Entry
		r := rand.New(rand.NewPCG(1, 2))
		now := int64(1_000_000)
		end := now + int64(1000/rate*1e6)
		var asks, renews, local, plain int
		type pending struct {
			at   int64
			req  Request
			cost float64
		}
		var out *pending
		redis := 100000.0
		for now < end {
			now += int64(r.ExpFloat64() / rate * 1e6)
			if out != nil && now >= out.at {
				g := min(out.req.Want, redis)
				e2 := out.req.Epoch
				if e2 == 0 {
					e2 = 1
				}
				p.Apply(&e, Reply{Decision: bucket.Decision{Allowed: true, Remaining: 90000}, Epoch: e2, Held: out.req.Holding - out.req.Consumed*0 + g}, out.cost, out.at)
				out = nil
			}
			o, _, req, renew := p.Take(&e, l, 1, now)
			switch o {
			case Local:
				local++
				if renew {
					renews++
					out = &pending{at: now + 500, req: p.Renew(&e, now)}
				}
			case Ask:
				asks++
				out = &pending{at: now + 500, req: req, cost: 1}
			case Plain:
				plain++
			}
		}
		fmt.Printf("rate %v: asks %d renews %d plain %d local %d size %.0f\n", rate, asks, renews, plain, local, e.Size)
	}
}
