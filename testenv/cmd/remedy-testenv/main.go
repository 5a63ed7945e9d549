// Command remedy-testenv runs a real etcd + kube-apiserver on loopback for
// remedy's integration tests, installs the CRDs remedy watches, and writes a
// kubeconfig. It is a small, dependency-free cousin of controller-runtime's
// envtest that any test runner (cargo included) can drive through files and
// signals.
//
//	remedy-testenv up   --dir DIR [--crds DIR] [--bin DIR] [-- EXTRA-KUBE-APISERVER-FLAGS...]
//	remedy-testenv wait --dir DIR [--timeout 180s]
//
// While `up` runs: SIGTERM/SIGINT stop everything and remove DIR/ready;
// SIGUSR1 restarts kube-apiserver on the same port (etcd keeps running) and
// then writes the restart count to DIR/restarted.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	readyTimeout = 120 * time.Second // etcd and kube-apiserver /readyz
	crdTimeout   = 60 * time.Second  // all CRDs Established and served
	stopGrace    = 10 * time.Second  // SIGTERM → SIGKILL
	contextName  = "remedy-test"
)

var logger = log.New(os.Stderr, "remedy-testenv: ", log.Ldate|log.Ltime|log.Lmicroseconds)

func logf(format string, args ...any) { logger.Printf(format, args...) }

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  remedy-testenv up   --dir DIR [--crds DIR] [--bin DIR] [--lifeline-stdin] [-- EXTRA-KUBE-APISERVER-FLAGS...]
  remedy-testenv wait --dir DIR [--timeout 180s]

up starts etcd and kube-apiserver on free loopback ports, installs the CRDs,
writes DIR/kubeconfig and DIR/ready, and stays in the foreground. Flags after
"--" are appended to kube-apiserver's (e.g. -- --watch-cache=false).
  SIGTERM/SIGINT  stop kube-apiserver, then etcd, remove DIR/ready, exit 0
  SIGUSR1         restart kube-apiserver on the same port, then write DIR/restarted
wait blocks until DIR/ready exists and the apiserver answers /readyz.
`)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = cmdUp(os.Args[2:])
	case "wait":
		err = cmdWait(os.Args[2:])
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "remedy-testenv: unknown command %q\n", os.Args[1])
		usage()
	}
	if err != nil {
		logf("error: %v", err)
		os.Exit(1)
	}
}

// ---------------------------------------------------------------------------
// up

type env struct {
	dir, binDir, crdDir  string
	etcdClient, etcdPeer int
	apiPort              int
	client               *http.Client
	extraAPIArgs         []string // after "--" on the command line
	etcd, api            *proc
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }
func (e *env) server() string          { return fmt.Sprintf("https://127.0.0.1:%d", e.apiPort) }

func cmdUp(args []string) error {
	t0 := time.Now()
	exeDir := "."
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			exeDir = filepath.Dir(exe)
		}
	}
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory (certs, etcd data, logs, kubeconfig, ready)")
	// crds.sh (run by build.sh) writes the CRD sets next to the binaries.
	crds := fs.String("crds", filepath.Join(exeDir, "crds", "default"), "directory of CRD manifests (*.yaml) to install, e.g. testenv/bin/crds/capi-v1.10")
	bin := fs.String("bin", filepath.Join(exeDir, "..", "bin"), "directory holding kube-apiserver and etcd")
	lifeline := fs.Bool("lifeline-stdin", false, "shut down when stdin reaches EOF (the parent test process exited)")
	fs.Parse(args)
	// Extra kube-apiserver flags only after an explicit "--".
	if *dir == "" || (fs.NArg() > 0 && (len(args) <= fs.NArg() || args[len(args)-fs.NArg()-1] != "--")) {
		usage()
	}
	e := &env{extraAPIArgs: fs.Args()}
	var err error
	for _, p := range []struct {
		dst *string
		src string
	}{{&e.dir, *dir}, {&e.crdDir, *crds}, {&e.binDir, *bin}} {
		if *p.dst, err = filepath.Abs(p.src); err != nil {
			return err
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(e.binDir, b)); err != nil {
			return fmt.Errorf("%s not found in %s (run testenv/build.sh or pass --bin): %v", b, e.binDir, err)
		}
	}
	if _, err := os.Stat(e.crdDir); err != nil {
		return fmt.Errorf("CRD directory %s: %v (testenv/build.sh writes testenv/bin/crds/ with crds.sh)", e.crdDir, err)
	}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return err
	}
	if pid, ok := readyPID(e.path("ready")); ok && pid != os.Getpid() && alive(pid) {
		return fmt.Errorf("%s: another remedy-testenv (pid %d) is already running there", e.dir, pid)
	}
	os.Remove(e.path("ready"))
	os.Remove(e.path("restarted"))

	// Signals: SIGTERM/SIGINT/SIGHUP cancel ctx (also aborts a startup in
	// progress); SIGUSR1 asks for an apiserver restart once we are ready.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restartReq := make(chan struct{}, 1)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	go func() {
		for s := range sigs {
			if s == syscall.SIGUSR1 {
				select {
				case restartReq <- struct{}{}:
				default: // a restart is already pending
				}
				continue
			}
			logf("received %v, shutting down", s)
			cancel()
		}
	}()
	if *lifeline {
		// A test binary cannot be relied on to run destructors for a
		// shared cluster; the pipe closing when it exits is reliable.
		go func() {
			io.Copy(io.Discard, os.Stdin)
			logf("stdin closed, shutting down")
			cancel()
		}()
	}

	err = e.start(ctx, t0)
	if err != nil {
		e.shutdown()
		if ctx.Err() != nil {
			return nil // interrupted during startup: a clean stop
		}
		return err
	}
	// Drop any SIGUSR1 that arrived before we were ready.
	select {
	case <-restartReq:
	default:
	}

	restarts := 0
	for {
		select {
		case <-ctx.Done():
			e.shutdown()
			return nil
		case <-restartReq:
			restarts++
			if err := e.restartAPIServer(ctx, restarts); err != nil {
				e.shutdown()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		case <-e.api.done:
			err := fmt.Errorf("kube-apiserver exited unexpectedly (%v); tail of %s:\n%s", e.api.err, e.api.logPath, tail(e.api.logPath))
			e.shutdown()
			return err
		case <-e.etcd.done:
			err := fmt.Errorf("etcd exited unexpectedly (%v); tail of %s:\n%s", e.etcd.err, e.etcd.logPath, tail(e.etcd.logPath))
			e.shutdown()
			return err
		}
	}
}

func (e *env) start(ctx context.Context, t0 time.Time) error {
	logf("state dir %s, binaries %s, CRDs %s", e.dir, e.binDir, e.crdDir)
	if err := writePKI(e.dir); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	var err error
	if e.client, err = adminClient(e.dir); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	e.etcdClient, e.etcdPeer, e.apiPort = ports[0], ports[1], ports[2]

	// Fresh etcd data every run: tests expect an empty cluster.
	if err := os.RemoveAll(e.path("etcd")); err != nil {
		return err
	}
	ts := time.Now()
	if e.etcd, err = startProc("etcd", filepath.Join(e.binDir, "etcd"), e.etcdArgs(), e.path("etcd.log")); err != nil {
		return err
	}
	etcdHealth := fmt.Sprintf("http://127.0.0.1:%d/health", e.etcdClient)
	if err := waitHTTP(ctx, http.DefaultClient, etcdHealth, e.etcd, readyTimeout); err != nil {
		return err
	}
	logf("etcd ready in %.1fs (client 127.0.0.1:%d, peer 127.0.0.1:%d)", time.Since(ts).Seconds(), e.etcdClient, e.etcdPeer)

	if err := e.startAPIServer(ctx); err != nil {
		return err
	}

	tc := time.Now()
	if err := installCRDs(ctx, e.client, e.server(), e.crdDir); err != nil {
		return err
	}
	logf("CRDs established and served in %.1fs", time.Since(tc).Seconds())

	if err := writeKubeconfig(e.dir, e.server()); err != nil {
		return err
	}
	ready := fmt.Sprintf("KUBECONFIG=%s\nAPISERVER=%s\nPID=%d\n", e.path("kubeconfig"), e.server(), os.Getpid())
	if err := writeAtomic(e.path("ready"), []byte(ready), 0o644); err != nil {
		return err
	}
	logf("ready in %.1fs total (up → ready)", time.Since(t0).Seconds())
	fmt.Print(ready)
	return nil
}

func (e *env) etcdArgs() []string {
	c := fmt.Sprintf("http://127.0.0.1:%d", e.etcdClient)
	p := fmt.Sprintf("http://127.0.0.1:%d", e.etcdPeer)
	return []string{
		"--name=remedy-test",
		"--data-dir=" + e.path("etcd"),
		"--listen-client-urls=" + c,
		"--advertise-client-urls=" + c,
		"--listen-peer-urls=" + p,
		"--initial-advertise-peer-urls=" + p,
		"--initial-cluster=remedy-test=" + p,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync", // tests do not need durability
	}
}

func (e *env) apiServerArgs() []string {
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", e.etcdClient),
		"--cert-dir=" + e.path("apiserver-certs"),
		"--tls-cert-file=" + e.path("apiserver.crt"),
		"--tls-private-key-file=" + e.path("apiserver.key"),
		"--client-ca-file=" + e.path("ca.crt"),
		"--secure-port=" + strconv.Itoa(e.apiPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1", // there is no default route to derive it from
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount", // no controller-manager creates default SAs
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + e.server(),
		"--service-account-key-file=" + e.path("sa.pub"),
		"--service-account-signing-key-file=" + e.path("sa.key"),
		"--etcd-compaction-interval=30s", // so watches eventually get 410 Gone
		// Open watches otherwise hold shutdown for --request-timeout (60s); this
		// caps the HTTP drain at 2s and answers 429 + Retry-After meanwhile.
		"--shutdown-send-retry-after=true",
		// The default lease reconciler rejects 127.0.0.1 for the kubernetes
		// Endpoints every 10s (loopback is invalid there); nothing here needs it.
		"--endpoint-reconciler-type=none",
	}
	// A list flag given twice appends, so a caller's own
	// --disable-admission-plugins (e.g. the node harness, whose pods need
	// ServiceAccount tokens) replaces ours instead of adding to it.
	for _, a := range e.extraAPIArgs {
		if strings.HasPrefix(a, "--disable-admission-plugins=") {
			kept := args[:0]
			for _, own := range args {
				if !strings.HasPrefix(own, "--disable-admission-plugins=") {
					kept = append(kept, own)
				}
			}
			args = kept
			break
		}
	}
	return append(args, e.extraAPIArgs...)
}

func (e *env) startAPIServer(ctx context.Context) error {
	ts := time.Now()
	var err error
	if e.api, err = startProc("kube-apiserver", filepath.Join(e.binDir, "kube-apiserver"), e.apiServerArgs(), e.path("kube-apiserver.log")); err != nil {
		return err
	}
	if err := waitHTTP(ctx, e.client, e.server()+"/readyz", e.api, readyTimeout); err != nil {
		return err
	}
	logf("apiserver ready in %.1fs (%s)", time.Since(ts).Seconds(), e.server())
	return nil
}

func (e *env) restartAPIServer(ctx context.Context, n int) error {
	logf("SIGUSR1: restarting kube-apiserver (restart #%d)", n)
	ts := time.Now()
	e.api.stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := e.startAPIServer(ctx); err != nil {
		return err
	}
	if err := writeAtomic(e.path("restarted"), []byte(fmt.Sprintf("%d\n", n)), 0o644); err != nil {
		return err
	}
	logf("apiserver restarted in %.1fs (restart #%d, same port %d)", time.Since(ts).Seconds(), n, e.apiPort)
	return nil
}

// shutdown stops kube-apiserver, then etcd, and removes DIR/ready.
func (e *env) shutdown() {
	e.api.stop()
	e.etcd.stop()
	os.Remove(e.path("ready"))
	logf("stopped")
}

// ---------------------------------------------------------------------------
// child processes

// Pdeathsig fires when the *thread* that forked the child exits, not the
// process, so every child is forked from one goroutine locked to a thread
// that lives as long as the harness.
var spawnCh = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread()
		for f := range spawnCh {
			f()
		}
	}()
}

type proc struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{} // closed once the process has exited
	err           error         // Wait's result, valid after done
}

func startProc(name, bin string, args []string, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "\n==== %s remedy-testenv: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr() // own process group (+ Pdeathsig on Linux)
	errc := make(chan error)
	spawnCh <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	return p, nil
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then SIGKILLs it.
func (p *proc) stop() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	ts := time.Now()
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		logf("%s did not stop within %s, sending SIGKILL", p.name, stopGrace)
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	logf("stopped %s in %.1fs (%v)", p.name, time.Since(ts).Seconds(), p.err)
}

// freePorts returns n distinct free loopback TCP ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200, p exits, ctx ends or timeout passes.
func waitHTTP(ctx context.Context, c *http.Client, url string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		if code, body, err := get(ctx, c, url); err != nil {
			last = err.Error()
		} else if code == http.StatusOK {
			return nil
		} else {
			last = fmt.Sprintf("HTTP %d: %s", code, truncate(body, 2000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%s exited before %s answered (%v); tail of %s:\n%s", p.name, url, p.err, p.logPath, tail(p.logPath))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not ready after %s (last: %s); tail of %s:\n%s", p.name, url, timeout, last, p.logPath, tail(p.logPath))
		}
	}
}

// tail returns the last lines of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 8000 {
		b = b[len(b)-8000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ---------------------------------------------------------------------------
// API access

func adminClient(dir string) (*http.Client, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s/ca.crt: no certificate", dir)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
			DisableKeepAlives: true, // the apiserver may restart under us
		},
	}, nil
}

func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	return do(ctx, c, http.MethodGet, url, nil)
}

func do(ctx context.Context, c *http.Client, method, url string, body []byte) (int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

type crd struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
		} `json:"versions"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// installCRDs creates every CRD in dir (*.yaml, *.yml; multi-document files
// allowed), then waits until each is Established and its served versions list.
func installCRDs(ctx context.Context, c *http.Client, server, dir string) error {
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	sort.Strings(files)
	if len(files) == 0 {
		logf("warning: no CRD manifests in %s", dir)
	}
	base := server + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	var crds []crd
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range docSep.Split(string(data), -1) {
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
				continue
			}
			var d crd
			if err := json.Unmarshal(js, &d); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if d.Kind != "CustomResourceDefinition" {
				return fmt.Errorf("%s: kind %q, want CustomResourceDefinition", f, d.Kind)
			}
			code, body, err := do(ctx, c, http.MethodPost, base, js)
			switch {
			case err != nil:
				return fmt.Errorf("creating CRD %s: %w", d.Metadata.Name, err)
			case code == http.StatusCreated || code == http.StatusOK:
				logf("created CRD %s (%s)", d.Metadata.Name, filepath.Base(f))
			case code == http.StatusConflict:
				logf("CRD %s already exists", d.Metadata.Name)
			default:
				return fmt.Errorf("creating CRD %s from %s: HTTP %d: %s", d.Metadata.Name, f, code, truncate(body, 2000))
			}
			crds = append(crds, d)
		}
	}

	deadline := time.Now().Add(crdTimeout)
	for _, d := range crds {
		var urls []string
		for _, v := range d.Spec.Versions {
			if v.Served {
				urls = append(urls, fmt.Sprintf("%s/apis/%s/%s/%s", server, d.Spec.Group, v.Name, d.Spec.Names.Plural))
			}
		}
		last := ""
		for {
			ok, why := crdReady(ctx, c, base+"/"+d.Metadata.Name, urls)
			if ok {
				break
			}
			last = why
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established/served after %s: %s", d.Metadata.Name, crdTimeout, last)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func crdReady(ctx context.Context, c *http.Client, crdURL string, listURLs []string) (bool, string) {
	code, body, err := get(ctx, c, crdURL)
	if err != nil {
		return false, err.Error()
	}
	if code != http.StatusOK {
		return false, fmt.Sprintf("GET %s: HTTP %d: %s", crdURL, code, truncate(body, 500))
	}
	var d crd
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		return false, err.Error()
	}
	established := false
	var conds []string
	for _, cond := range d.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message))
		if cond.Type == "Established" && cond.Status == "True" {
			established = true
		}
	}
	if !established {
		return false, "conditions: " + strings.Join(conds, "; ")
	}
	for _, u := range listURLs {
		code, body, err := get(ctx, c, u)
		if err != nil {
			return false, err.Error()
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("GET %s: HTTP %d: %s", u, code, truncate(body, 500))
		}
	}
	return true, ""
}

// ---------------------------------------------------------------------------
// files

type kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server                   string `json:"server"`
		CertificateAuthorityData []byte `json:"certificate-authority-data"` // []byte marshals as base64
	} `json:"cluster"`
}

type namedUser struct {
	Name string `json:"name"`
	User struct {
		ClientCertificateData []byte `json:"client-certificate-data"`
		ClientKeyData         []byte `json:"client-key-data"`
	} `json:"user"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster   string `json:"cluster"`
		User      string `json:"user"`
		Namespace string `json:"namespace"`
	} `json:"context"`
}

func writeKubeconfig(dir, server string) error {
	var c namedCluster
	var u namedUser
	var x namedContext
	c.Name, c.Cluster.Server = contextName, server
	u.Name = adminCN
	x.Name, x.Context.Cluster, x.Context.User, x.Context.Namespace = contextName, contextName, adminCN, "default"
	for _, f := range []struct {
		dst  *[]byte
		file string
	}{{&c.Cluster.CertificateAuthorityData, "ca.crt"}, {&u.User.ClientCertificateData, "admin.crt"}, {&u.User.ClientKeyData, "admin.key"}} {
		b, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			return err
		}
		*f.dst = b
	}
	out, err := yaml.Marshal(kubeconfig{
		APIVersion: "v1", Kind: "Config", CurrentContext: contextName,
		Clusters: []namedCluster{c}, Users: []namedUser{u}, Contexts: []namedContext{x},
	})
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "kubeconfig"), out, 0o600)
}

// writeAtomic writes data to path via a temporary file and rename, so readers
// never see a partial file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readyFile parses DIR/ready (KEY=VALUE lines).
func readyFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	for _, k := range []string{"KUBECONFIG", "APISERVER", "PID"} {
		if m[k] == "" {
			return nil, fmt.Errorf("%s: missing %s", path, k)
		}
	}
	return m, nil
}

func readyPID(path string) (int, bool) {
	m, err := readyFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(m["PID"])
	return pid, err == nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ---------------------------------------------------------------------------
// wait

func cmdWait(args []string) error {
	fs := flag.NewFlagSet("wait", flag.ExitOnError)
	dir := fs.String("dir", "", "state directory passed to `up`")
	timeout := fs.Duration("timeout", 180*time.Second, "how long to wait")
	fs.Parse(args)
	if *dir == "" || fs.NArg() != 0 {
		usage()
	}
	t0 := time.Now()
	readyPath := filepath.Join(*dir, "ready")
	last := "no " + readyPath + " yet"
	for {
		if m, err := readyFile(readyPath); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				last = err.Error()
			}
		} else if pid, _ := strconv.Atoi(m["PID"]); !alive(pid) {
			last = fmt.Sprintf("stale %s: pid %d is not running", readyPath, pid)
		} else if c, err := adminClient(*dir); err != nil {
			last = err.Error()
		} else if code, body, err := get(context.Background(), c, m["APISERVER"]+"/readyz"); err != nil {
			last = err.Error()
		} else if code != http.StatusOK {
			last = fmt.Sprintf("%s/readyz: HTTP %d: %s", m["APISERVER"], code, truncate(body, 500))
		} else {
			logf("ready after %.1fs: %s", time.Since(t0).Seconds(), m["APISERVER"])
			b, _ := os.ReadFile(readyPath)
			fmt.Print(string(b))
			return nil
		}
		if time.Since(t0) > *timeout {
			return fmt.Errorf("timed out after %s waiting for the test apiserver in %s (last: %s); see %s/kube-apiserver.log and %s/etcd.log",
				*timeout, *dir, last, *dir, *dir)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
