// quiclab-quic-go: quic-go's HTTP/3 server and client, driven the way quiclab drives an
// external stack (see docs/stacks.md and crates/quiclab-external/stacks/quic-go.toml).
//
//	quiclab-quic-go server --addr ADDR --port PORT --cert FILE --key FILE --htdocs DIR [--qlog-dir DIR]
//	quiclab-quic-go client --cacert FILE --download DIR [--qlog-dir DIR] URL
//	quiclab-quic-go telemetry --mode MODE --units-per-second N --flush N --duration D --cacert FILE [--qlog-dir DIR] URL
//
// The server also receives quiclab telemetry when given --telemetry-log FILE (telemetry.go).
//
// The client prints one line per event, as it happens, for the adapter to stamp:
// "start", "handshake complete alpn=h3", "status 200", "first byte", "last byte",
// and "error: ..." on failure.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: quiclab-quic-go server|client|telemetry [flags]; see -h of each")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = server(os.Args[2:])
	case "client":
		err = client(os.Args[2:])
	case "telemetry":
		err = telemetryClient(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q; allowed: server, client, telemetry", os.Args[1])
	}
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
}

// ccFlag is the congestion controller flag every command takes.
func ccFlag(fs *flag.FlagSet) *string {
	return fs.String("cc", "cubic", "congestion controller: cubic (quic-go's only one)")
}

// checkCC refuses a controller quic-go does not offer: its sender is Cubic (a NewReno mode
// exists inside it but is not exposed).
func checkCC(cc string) error {
	if cc != "cubic" {
		return fmt.Errorf("--cc %q: quic-go offers cubic only", cc)
	}
	return nil
}

// trustPool is the certificates of a PEM file, for a client to trust.
func trustPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}

// keyLog is where TLS secrets go (NSS key log format, which Wireshark reads): the file that
// SSLKEYLOGFILE names, appended to, as quiclab's own endpoints do; nowhere when it is unset.
func keyLog() io.Writer {
	path := os.Getenv("SSLKEYLOGFILE")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "quiclab-quic-go: warning: SSLKEYLOGFILE %s: %v\n", path, err)
		return nil
	}
	return f
}

// quicConfig is the configuration both sides share: qlog files in dir when given.
func quicConfig(qlogDir string) *quic.Config {
	c := &quic.Config{MaxIdleTimeout: 10 * time.Second}
	if qlogDir != "" {
		// qlog's default tracer writes to $QLOGDIR, one file per connection
		os.Setenv("QLOGDIR", qlogDir)
		c.Tracer = qlog.DefaultConnectionTracer
	}
	return c
}

func server(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	addr := fs.String("addr", "::", "address to listen on")
	port := fs.Int("port", 443, "UDP port")
	cert := fs.String("cert", "", "PEM certificate chain")
	key := fs.String("key", "", "PEM private key")
	htdocs := fs.String("htdocs", "", "documents directory")
	qlogDir := fs.String("qlog-dir", "", "write qlog files here")
	cc := ccFlag(fs)
	telemetryLog := fs.String("telemetry-log", "", "also receive quiclab telemetry (ALPN quiclab-telemetry) and write its records here (JSON lines)")
	fs.Parse(args)
	if err := checkCC(*cc); err != nil {
		return err
	}
	if *cert == "" || *key == "" || *htdocs == "" {
		return errors.New("--cert, --key and --htdocs are required")
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	srv := &http3.Server{
		Addr:       net.JoinHostPort(*addr, strconv.Itoa(*port)),
		TLSConfig:  http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}, KeyLogWriter: keyLog()}),
		QUICConfig: quicConfig(*qlogDir),
		Handler:    http.FileServer(http.Dir(*htdocs)),
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	if *telemetryLog != "" {
		return serveWithTelemetry(srv, *telemetryLog, stop)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe() }()
	select {
	case err := <-done:
		return err
	case <-stop:
		// closes every connection, which flushes their qlog files
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		return nil
	}
}

// serveWithTelemetry serves HTTP/3 and quiclab telemetry on one UDP port, telling them apart
// by ALPN, until a signal; telemetry connections are read at a real-time priority.
func serveWithTelemetry(srv *http3.Server, logPath string, stop <-chan os.Signal) error {
	log, err := newRecordLog(logPath)
	if err != nil {
		return err
	}
	if err := useRealtimePriority(); err != nil {
		fmt.Fprintf(os.Stderr, "quiclab-quic-go: warning: cannot run at a real-time priority (%v)\n", err)
	} else {
		fmt.Fprintln(os.Stderr, "quiclab-quic-go: telemetry at a real-time priority (SCHED_FIFO 5)")
	}
	tlsConf := srv.TLSConfig.Clone()
	tlsConf.GetConfigForClient = nil
	tlsConf.NextProtos = []string{http3.NextProtoH3, alpnTelemetry}
	conf := srv.QUICConfig.Clone()
	conf.EnableDatagrams = true
	ln, err := quic.ListenAddrEarly(srv.Addr, tlsConf, conf)
	if err != nil {
		log.close()
		return err
	}
	var (
		mu    sync.Mutex
		conns []*quic.Conn
		wg    sync.WaitGroup
	)
	accepted := make(chan error, 1)
	go func() {
		for index := uint32(0); ; {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				accepted <- err
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			if conn.ConnectionState().TLS.NegotiatedProtocol == alpnTelemetry {
				wg.Add(1)
				go func(i uint32) {
					defer wg.Done()
					serveTelemetry(conn, i, log)
				}(index)
				index++
			} else {
				go srv.ServeQUICConn(conn)
			}
		}
	}()
	select {
	case err = <-accepted:
	case <-stop:
	}
	ln.Close()
	mu.Lock()
	for _, c := range conns {
		c.CloseWithError(0, "server stopping")
	}
	mu.Unlock()
	// every connection's record is written before the log closes
	wg.Wait()
	if cerr := log.close(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, quic.ErrServerClosed) {
		err = nil
	}
	return err
}

func client(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	cacert := fs.String("cacert", "", "PEM certificate to trust")
	download := fs.String("download", "", "directory to save the body in")
	qlogDir := fs.String("qlog-dir", "", "write qlog files here")
	cc := ccFlag(fs)
	fs.Parse(args)
	if err := checkCC(*cc); err != nil {
		return err
	}
	if fs.NArg() != 1 || *cacert == "" || *download == "" {
		return errors.New("give --cacert, --download and one URL")
	}
	url := fs.Arg(0)
	pool, err := trustPool(*cacert)
	if err != nil {
		return err
	}
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{http3.NextProtoH3}, KeyLogWriter: keyLog()},
		QUICConfig:      quicConfig(*qlogDir),
	}
	defer tr.Close()
	tr.Dial = func(ctx context.Context, addr string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error) {
		fmt.Println("start")
		conn, err := quic.DialAddrEarly(ctx, addr, tlsConf, conf)
		if err != nil {
			return nil, err
		}
		<-conn.HandshakeComplete()
		fmt.Printf("handshake complete alpn=%s\n", conn.ConnectionState().TLS.NegotiatedProtocol)
		return conn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Printf("status %d\n", resp.StatusCode)
	out, err := os.Create(filepath.Join(*download, "body"))
	if err != nil {
		return err
	}
	defer out.Close()
	buf := make([]byte, 64*1024)
	first := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if first {
				fmt.Println("first byte")
				first = false
			}
			if _, werr := out.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	fmt.Println("last byte")
	return nil
}
