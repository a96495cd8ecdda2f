// quiclab's telemetry protocol over quic-go (the contract is in crates/quiclab-telemetry):
// 8-byte big-endian units, each its generation time in microseconds of CLOCK_MONOTONIC, sent
// in flushes on one unidirectional stream (quic-stream), a new one per flush (quic-streams)
// or one datagram per flush (quic-datagrams), ALPN "quiclab-telemetry". Both sides write
// quiclab's records as JSON lines: the client its flushes and a summary on standard output,
// the server every unit it read and every connection's end into its telemetry log.
//
// The end of a run: quic-go cannot tell a sender when its stream data is acknowledged, so the
// client asks. It opens a bidirectional stream carrying the number of unidirectional streams
// it opened (8 bytes, big-endian) and finishes it; the server answers with the number of
// units it has read (8 bytes) once it has read that many streams to their end, and finishes
// its side. Then the client closes the connection (application error 0).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sys/unix"
)

const (
	alpnTelemetry = "quiclab-telemetry"
	unitBytes     = 8
	// SCHED_FIFO priority of telemetry endpoints: quiclab's own (below its link emulator's).
	realtimePriority = 5
	// from the end of the handshake to the schedule's epoch
	lead = 5 * time.Millisecond
	// how long before a flush is due the clock stops sleeping and spins
	spin = 200 * time.Microsecond
	// the largest flush: 128 units fit one datagram of a 1200-byte packet
	maxFlushUnits = 128
)

// monoUS is CLOCK_MONOTONIC in microseconds: the clock every namespace shares, and quiclab's.
func monoUS() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1_000_000 + uint64(ts.Nsec)/1000
}

// useRealtimePriority puts every thread of the process in SCHED_FIFO at realtimePriority;
// threads the runtime starts later are cloned from these and inherit it.
func useRealtimePriority() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: realtimePriority}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// isRealtime tells whether the calling thread runs in SCHED_FIFO.
func isRealtime() bool {
	a, err := unix.SchedGetAttr(0, 0)
	return err == nil && a.Policy == unix.SCHED_FIFO
}

// schedule is quiclab's Schedule: unit i is generated at epoch + floor(i * 1e6 / rate); flush
// k holds units k*n.. and is due when its last unit is generated.
type schedule struct {
	EpochUS        uint64 `json:"epoch_us"`
	UnitsPerSecond uint32 `json:"units_per_second"`
	FlushUnits     uint32 `json:"flush_units"`
	Units          uint64 `json:"units"`
}

func (s schedule) genUS(i uint64) uint64 {
	return s.EpochUS + i*1_000_000/uint64(s.UnitsPerSecond)
}

func (s schedule) flushes() uint64 {
	n := uint64(s.FlushUnits)
	return (s.Units + n - 1) / n
}

func (s schedule) flushRange(k uint64) (uint64, uint64) {
	n := uint64(s.FlushUnits)
	return min(k*n, s.Units), min((k+1)*n, s.Units)
}

func (s schedule) flushDueUS(k uint64) uint64 {
	_, end := s.flushRange(k)
	return s.genUS(max(end, 1) - 1)
}

func (s schedule) flushBytes(k uint64) []byte {
	start, end := s.flushRange(k)
	out := make([]byte, 0, (end-start)*unitBytes)
	for i := start; i < end; i++ {
		out = binary.BigEndian.AppendUint64(out, s.genUS(i))
	}
	return out
}

// sleepUntilUS sleeps to spin before the deadline, then spins to it.
func sleepUntilUS(deadline uint64) {
	if now := monoUS(); now+uint64(spin/time.Microsecond) < deadline {
		time.Sleep(time.Duration(deadline-now)*time.Microsecond - spin)
	}
	for monoUS() < deadline {
	}
}

type flushRecord struct {
	Record string  `json:"record"`
	Flush  uint64  `json:"flush"`
	GenUS  uint64  `json:"gen_us"`
	Units  uint32  `json:"units"`
	SendUS uint64  `json:"send_us"`
	Stream *uint64 `json:"stream,omitempty"`
}

type transportStats struct {
	CongestionControl             *string `json:"congestion_control"`
	CongestionControlExperimental bool    `json:"congestion_control_experimental"`
	PacketsLost                   *uint64 `json:"packets_lost"`
	BytesRetransmitted            *uint64 `json:"bytes_retransmitted"`
	FirstRetransmitOffset         *uint64 `json:"first_retransmit_offset"`
	CongestionEvents              *uint64 `json:"congestion_events"`
	CwndFinalBytes                *uint64 `json:"cwnd_final_bytes"`
	CwndPeakBytes                 *uint64 `json:"cwnd_peak_bytes"`
	MinRTTUS                      *uint64 `json:"min_rtt_us"`
	SmoothedRTTUS                 *uint64 `json:"smoothed_rtt_us"`
	ImpossibleRTTSamples          *uint64 `json:"impossible_rtt_samples"`
	MaxUDPPayload                 *uint64 `json:"max_udp_payload"`
}

type summaryRecord struct {
	Record          string         `json:"record"`
	Mode            string         `json:"mode"`
	Schedule        schedule       `json:"schedule"`
	ConnectUS       uint64         `json:"connect_us"`
	HandshakeDoneUS *uint64        `json:"handshake_done_us"`
	EndUS           uint64         `json:"end_us"`
	FlushesSent     uint64         `json:"flushes_sent"`
	UnitsSent       uint64         `json:"units_sent"`
	SendLateP50US   uint64         `json:"send_late_p50_us"`
	SendLateP99US   uint64         `json:"send_late_p99_us"`
	SendLateMaxUS   uint64         `json:"send_late_max_us"`
	Realtime        bool           `json:"realtime"`
	ALPN            *string        `json:"alpn"`
	Group           *string        `json:"group"`
	TransportStats  transportStats `json:"transport_stats"`
	Error           *string        `json:"error"`
}

func ptr[T any](v T) *T { return &v }

// groupName is the key-exchange group as quiclab names it.
func groupName(id tls.CurveID) string {
	switch id {
	case tls.X25519:
		return "x25519"
	case tls.CurveP256:
		return "p256"
	case tls.CurveP384:
		return "p384"
	case tls.CurveP521:
		return "p521"
	case tls.X25519MLKEM768:
		return "x25519mlkem768"
	}
	return fmt.Sprintf("0x%04x", uint16(id))
}

func telemetryClient(args []string) error {
	fs := flag.NewFlagSet("telemetry", flag.ExitOnError)
	mode := fs.String("mode", "quic-streams", "how flushes travel: quic-stream, quic-streams or quic-datagrams")
	rate := fs.Uint("units-per-second", 1000, "units generated per second (1 to 1000000)")
	flushUnits := fs.Uint("flush", 10, fmt.Sprintf("units per flush (1 to %d)", maxFlushUnits))
	duration := fs.Duration("duration", 10*time.Second, "how long units are generated")
	drain := fs.Duration("drain", 10*time.Second, "how long to wait after the last flush for the server to have everything")
	cacert := fs.String("cacert", "", "PEM certificate to trust")
	qlogDir := fs.String("qlog-dir", "", "write qlog files here")
	cc := ccFlag(fs)
	realtime := fs.Bool("realtime", true, "run at a real-time priority (SCHED_FIFO 5)")
	mtuDiscovery := fs.String("mtu-discovery", "on", "probe for a larger packet size: on or off")
	fs.Parse(args)
	if err := checkCC(*cc); err != nil {
		return err
	}
	if *mtuDiscovery != "on" && *mtuDiscovery != "off" {
		return fmt.Errorf("--mtu-discovery %q: allowed: on, off", *mtuDiscovery)
	}
	if fs.NArg() != 1 || *cacert == "" {
		return errors.New("give --cacert and one URL (https://HOST[:PORT])")
	}
	switch *mode {
	case "quic-stream", "quic-streams", "quic-datagrams":
	default:
		return fmt.Errorf("--mode %q: allowed: quic-stream, quic-streams, quic-datagrams", *mode)
	}
	if *rate < 1 || *rate > 1_000_000 {
		return fmt.Errorf("--units-per-second %d: allowed: 1 to 1000000", *rate)
	}
	if *flushUnits < 1 || *flushUnits > maxFlushUnits {
		return fmt.Errorf("--flush %d: allowed: 1 to %d", *flushUnits, maxFlushUnits)
	}
	units := uint64(duration.Seconds()*float64(*rate) + 0.5)
	if units == 0 {
		return fmt.Errorf("--duration %v: allowed: at least one unit interval", *duration)
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q: give https://HOST[:PORT]", fs.Arg(0))
	}
	addr := u.Host
	if u.Port() == "" {
		addr += ":443"
	}
	pool, err := trustPool(*cacert)
	if err != nil {
		return err
	}
	if *realtime {
		if err := useRealtimePriority(); err != nil {
			fmt.Fprintf(os.Stderr, "quiclab-quic-go: warning: cannot run at a real-time priority (%v)\n", err)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	summary := summaryRecord{
		Record:   "summary",
		Mode:     *mode,
		Realtime: isRealtime(),
		Schedule: schedule{UnitsPerSecond: uint32(*rate), FlushUnits: uint32(*flushUnits), Units: units},
	}
	conf := quicConfig(*qlogDir)
	conf.DisablePathMTUDiscovery = *mtuDiscovery == "off"
	flushes, err := sendUnits(&summary, addr, u.Hostname(), pool, conf, *drain)
	if err != nil {
		summary.Error = ptr(err.Error())
	}
	for _, f := range flushes {
		enc.Encode(f)
	}
	summary.FlushesSent = uint64(len(flushes))
	late := make([]uint64, 0, len(flushes))
	for _, f := range flushes {
		summary.UnitsSent += uint64(f.Units)
		late = append(late, f.SendUS-min(f.SendUS, summary.Schedule.flushDueUS(f.Flush)))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	pick := func(p float64) uint64 {
		if len(late) == 0 {
			return 0
		}
		return late[int(float64(len(late)-1)*p+0.5)]
	}
	summary.SendLateP50US, summary.SendLateP99US, summary.SendLateMaxUS = pick(0.5), pick(0.99), pick(1)
	return enc.Encode(summary)
}

// sendUnits runs the schedule over one connection and fills in the summary; the flushes sent
// and why the run ended early, if it did.
func sendUnits(s *summaryRecord, addr, host string, pool *x509.CertPool, conf *quic.Config, drain time.Duration) ([]flushRecord, error) {
	tlsConf := &tls.Config{RootCAs: pool, ServerName: host, NextProtos: []string{alpnTelemetry}, KeyLogWriter: keyLog()}
	conf.EnableDatagrams = s.Mode == "quic-datagrams"
	s.ConnectUS = monoUS()
	s.Schedule.EpochUS = s.ConnectUS
	s.EndUS = s.ConnectUS
	// the connection attempt, then the whole run
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+time.Duration(s.Schedule.Units)*time.Second/time.Duration(s.Schedule.UnitsPerSecond))
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, tlsConf, conf)
	if err != nil {
		s.EndUS = monoUS()
		return nil, fmt.Errorf("connecting: %w", err)
	}
	done := monoUS()
	s.HandshakeDoneUS = ptr(done)
	s.Schedule.EpochUS = done + uint64(lead/time.Microsecond)
	state := conn.ConnectionState()
	s.ALPN = ptr(state.TLS.NegotiatedProtocol)
	s.Group = ptr(groupName(state.TLS.CurveID))
	defer func() {
		stats := conn.ConnectionStats()
		s.TransportStats = transportStats{
			CongestionControl: ptr("cubic"),
			PacketsLost:       ptr(stats.PacketsLost),
			CwndFinalBytes:    ptr(stats.CongestionWindow),
			MinRTTUS:          ptr(uint64(stats.MinRTT / time.Microsecond)),
			SmoothedRTTUS:     ptr(uint64(stats.SmoothedRTT / time.Microsecond)),
		}
		conn.CloseWithError(0, "done")
		// let the close reach the server before this process (and maybe the path) ends
		time.Sleep(min(stats.SmoothedRTT, time.Second))
	}()
	if s.Mode == "quic-datagrams" && !state.SupportsDatagrams.Remote {
		return nil, errors.New("the server does not accept QUIC datagrams")
	}

	sched := s.Schedule
	var one *quic.SendStream
	if s.Mode == "quic-stream" {
		if one, err = conn.OpenUniStream(); err != nil {
			return nil, fmt.Errorf("opening the stream: %w", err)
		}
	}
	// Flushes are written from a thread of their own, so that a sleep ends on time. A write
	// that blocks (no stream credit) delays the flushes after it: that shows as their send
	// lateness, never as a shifted generation time.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	flushes := make([]flushRecord, 0, sched.flushes())
	streams := uint64(0)
	if one != nil {
		streams = 1
	}
	for k := uint64(0); k < sched.flushes(); k++ {
		sleepUntilUS(sched.flushDueUS(k))
		sendUS := monoUS()
		bytes := sched.flushBytes(k)
		start, _ := sched.flushRange(k)
		f := flushRecord{Record: "flush", Flush: k, GenUS: sched.genUS(start), Units: uint32(len(bytes) / unitBytes), SendUS: sendUS}
		switch s.Mode {
		case "quic-stream":
			if _, err := one.Write(bytes); err != nil {
				return flushes, fmt.Errorf("sending flush %d: %w", k, err)
			}
			f.Stream = ptr(uint64(one.StreamID()))
		case "quic-streams":
			st, err := conn.OpenUniStreamSync(ctx)
			if err == nil {
				streams++
				_, err = st.Write(bytes)
			}
			if err == nil {
				err = st.Close()
			}
			if err != nil {
				return flushes, fmt.Errorf("sending flush %d: %w", k, err)
			}
			f.Stream = ptr(uint64(st.StreamID()))
		default:
			if err := conn.SendDatagram(bytes); err != nil {
				return flushes, fmt.Errorf("sending flush %d: %w", k, err)
			}
		}
		flushes = append(flushes, f)
	}
	runtime.UnlockOSThread()
	if one != nil {
		if err := one.Close(); err != nil {
			return flushes, err
		}
	}
	err = askEnd(conn, streams, drain)
	s.EndUS = monoUS()
	return flushes, err
}

// askEnd waits until the server has read `streams` unidirectional streams to their end.
func askEnd(conn *quic.Conn, streams uint64, drain time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("asking the server whether it has everything: %w", err)
	}
	st.SetDeadline(time.Now().Add(drain))
	st.Write(binary.BigEndian.AppendUint64(nil, streams))
	st.Close()
	answer, err := io.ReadAll(st)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("the server did not have everything within %.1f s of the last flush", drain.Seconds())
		}
		return fmt.Errorf("waiting for the server to have everything: %w", err)
	}
	if len(answer) != unitBytes {
		return fmt.Errorf("the server answered the end of the run with %d bytes, not %d", len(answer), unitBytes)
	}
	return nil
}

// recordLog writes the server's records, one JSON line each, from a goroutine of its own so
// that a slow write never holds back the reading of the next flush.
type recordLog struct {
	records chan any
	done    chan error
}

func newRecordLog(path string) (*recordLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	l := &recordLog{records: make(chan any, 65536), done: make(chan error, 1)}
	go func() {
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		var first error
		for r := range l.records {
			if err := enc.Encode(r); err != nil && first == nil {
				first = err
			}
		}
		if err := w.Flush(); err != nil && first == nil {
			first = err
		}
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		l.done <- first
	}()
	return l, nil
}

func (l *recordLog) close() error {
	close(l.records)
	return <-l.done
}

type unitRecord struct {
	Record     string  `json:"record"`
	Connection uint32  `json:"connection"`
	GenUS      uint64  `json:"gen_us"`
	RecvUS     uint64  `json:"recv_us"`
	Stream     *uint64 `json:"stream,omitempty"`
	Datagram   *uint64 `json:"datagram,omitempty"`
}

type connectionRecord struct {
	Record       string  `json:"record"`
	Connection   uint32  `json:"connection"`
	Transport    string  `json:"transport"`
	Peer         string  `json:"peer"`
	Units        uint64  `json:"units"`
	Streams      uint64  `json:"streams"`
	Datagrams    uint64  `json:"datagrams"`
	PartialBytes uint64  `json:"partial_bytes"`
	Error        *string `json:"error,omitempty"`
}

// receiver is one telemetry connection's state on the server.
type receiver struct {
	conn  *quic.Conn
	index uint32
	log   *recordLog

	mu       sync.Mutex
	changed  *sync.Cond
	units    uint64
	partial  uint64
	streams  uint64
	finished uint64 // streams read to their end
	err      error
}

func (r *receiver) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// normalEnd: the peer or this side closed the connection on purpose.
func normalEnd(err error) bool {
	var app *quic.ApplicationError
	return errors.As(err, &app) || errors.Is(err, context.Canceled)
}

// units turns bytes read at recvUS into unit records; the bytes of an incomplete unit carry
// over in `pending`.
func (r *receiver) emit(pending *[]byte, data []byte, recvUS uint64, stream, datagram *uint64) {
	*pending = append(*pending, data...)
	n := 0
	for len(*pending) >= unitBytes {
		gen := binary.BigEndian.Uint64((*pending)[:unitBytes])
		*pending = (*pending)[unitBytes:]
		r.log.records <- unitRecord{Record: "unit", Connection: r.index, GenUS: gen, RecvUS: recvUS, Stream: stream, Datagram: datagram}
		n++
	}
	r.mu.Lock()
	r.units += uint64(n)
	r.mu.Unlock()
}

func (r *receiver) readStream(s *quic.ReceiveStream, wg *sync.WaitGroup) {
	defer wg.Done()
	id := uint64(s.StreamID())
	buf := make([]byte, 64*1024)
	var pending []byte
	for {
		n, err := s.Read(buf)
		if n > 0 {
			r.emit(&pending, buf[:n], monoUS(), &id, nil)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if !normalEnd(err) {
				r.fail(fmt.Errorf("reading stream %d: %w", id, err))
			}
			break
		}
	}
	r.mu.Lock()
	r.partial += uint64(len(pending))
	r.finished++
	r.changed.Broadcast()
	r.mu.Unlock()
}

// answerEnd answers the client's end-of-run question (see the top of this file).
func (r *receiver) answerEnd(s *quic.Stream) {
	ask, err := io.ReadAll(s)
	if err != nil || len(ask) != unitBytes {
		s.CancelWrite(1)
		return
	}
	want := binary.BigEndian.Uint64(ask)
	r.mu.Lock()
	for r.finished < want && r.conn.Context().Err() == nil {
		r.changed.Wait()
	}
	units := r.units
	r.mu.Unlock()
	s.Write(binary.BigEndian.AppendUint64(nil, units))
	s.Close()
}

// serveTelemetry reads units from every unidirectional stream and datagram of conn until it
// closes, then writes its connection record.
func serveTelemetry(conn *quic.Conn, index uint32, log *recordLog) {
	r := &receiver{conn: conn, index: index, log: log}
	r.changed = sync.NewCond(&r.mu)
	ctx := conn.Context()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		for {
			s, err := conn.AcceptUniStream(ctx)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.streams++
			r.mu.Unlock()
			wg.Add(1)
			go r.readStream(s, &wg)
		}
	}()
	datagrams := uint64(0)
	go func() {
		defer wg.Done()
		for {
			d, err := conn.ReceiveDatagram(ctx)
			if err != nil {
				return
			}
			id := datagrams
			datagrams++
			var pending []byte
			r.emit(&pending, d, monoUS(), nil, &id)
			r.mu.Lock()
			r.partial += uint64(len(pending))
			r.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for {
			s, err := conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			go r.answerEnd(s)
		}
	}()
	<-ctx.Done()
	if cause := context.Cause(ctx); !normalEnd(cause) {
		r.fail(cause)
	}
	// wake an end-of-run answer still waiting
	r.mu.Lock()
	r.changed.Broadcast()
	r.mu.Unlock()
	wg.Wait()
	rec := connectionRecord{
		Record: "connection", Connection: index, Transport: "quic", Peer: conn.RemoteAddr().String(),
		Units: r.units, Streams: r.streams, Datagrams: datagrams, PartialBytes: r.partial,
	}
	if r.err != nil {
		rec.Error = ptr(r.err.Error())
	}
	log.records <- rec
}
