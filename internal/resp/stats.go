package resp

import "sync/atomic"

// Stats are the connection server's counters, read from atomics.
type Stats struct {
	ConnectedClients    int64
	TotalConnections    int64
	RejectedConnections int64 // refused at accept: --max-clients, protected mode, shutdown
	// TLSHandshakeFailures counts TLS handshakes that failed or timed
	// out, of admitted and refused connections alike.
	TLSHandshakeFailures int64
	// OutputLimitDisconnections counts the connections closed over their
	// output limit (output.go), by class.
	OutputLimitDisconnections [NumOutputClasses]int64
}

// counters are the Server's atomics, changed on connect and disconnect,
// never per command.
type counters struct {
	connected            atomic.Int64
	totalConns           atomic.Int64
	rejected             atomic.Int64
	tlsHandshakeFailures atomic.Int64
	outputLimit          [NumOutputClasses]atomic.Int64
}

// Stats returns the connection server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		ConnectedClients:     s.n.connected.Load(),
		TotalConnections:     s.n.totalConns.Load(),
		RejectedConnections:  s.n.rejected.Load(),
		TLSHandshakeFailures: s.n.tlsHandshakeFailures.Load(),
		OutputLimitDisconnections: [NumOutputClasses]int64{
			s.n.outputLimit[NormalClient].Load(), s.n.outputLimit[PubSubClient].Load(),
		},
	}
}
