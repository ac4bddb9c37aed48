package storagetest

import (
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an in-process OCI registry, on 127.0.0.1 unless StartRegistryAt says otherwise
// (plain HTTP, which clients use for loopback and private addresses). t.Cleanup stops it.
type Registry struct {
	Host    string // HOST:PORT
	handler http.Handler

	srvMu sync.Mutex
	srv   *httptest.Server

	mu      sync.Mutex
	gets    map[string]int  // "manifests" / "blobs" → GET count
	corrupt map[string]bool // digests whose content is served with a flipped byte
	user    string          // RequireAuth's login; "" serves everyone
	pass    string
	refused int              // requests answered 401
	holds   map[string]*hold // digests whose GETs stop halfway (Hold)
}

// hold is one Hold: reached closes when a GET sent half the blob; release lets it finish.
type hold struct {
	reached, release chan struct{}
	once             sync.Once
}

// RequireAuth makes the registry answer every request without this basic-auth login with 401
// and a "WWW-Authenticate: Basic" challenge, as a private registry does. Push still works.
func (r *Registry) RequireAuth(user, pass string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.pass = user, pass
}

// Refused is the number of requests answered 401.
func (r *Registry) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// StartRegistry starts a registry on 127.0.0.1.
func StartRegistry(tb testing.TB) *Registry {
	tb.Helper()
	return StartRegistryAt(tb, "127.0.0.1:0")
}

// StartRegistryAt starts a registry listening on addr (HOST:PORT; port 0 picks one), e.g. a
// bridge address that pods reach. Clients speak plain HTTP to loopback and private (RFC 1918)
// hosts.
func StartRegistryAt(tb testing.TB, addr string) *Registry {
	tb.Helper()
	r := &Registry{gets: map[string]int{}, corrupt: map[string]bool{}, holds: map[string]*hold{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.serve(inner, w, req)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("registry on %s: %v", addr, err)
	}
	r.srv = serve(l, r.handler)
	tb.Cleanup(r.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *Registry) serve(inner http.Handler, w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(req.URL.Path, "/")
	var kind, ref string
	if n := len(parts); n >= 3 && (parts[n-2] == "manifests" || parts[n-2] == "blobs") {
		kind, ref = parts[n-2], parts[n-1]
	}
	r.mu.Lock()
	if req.Method == http.MethodGet && kind != "" {
		r.gets[kind]++
	}
	bad := r.corrupt[ref]
	held := r.holds[ref]
	user, pass := r.user, r.pass
	if u, p, ok := req.BasicAuth(); user != "" && (!ok || u != user || p != pass) {
		r.refused++
		r.mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="vmlet-test"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
		return
	}
	r.mu.Unlock()
	if !bad && held == nil || req.Method != http.MethodGet {
		inner.ServeHTTP(w, req)
		return
	}
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if len(body) > 0 && bad {
		body[len(body)/2] ^= 0xff
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	if held != nil {
		_, _ = w.Write(body[:len(body)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		held.once.Do(func() { close(held.reached) })
		select {
		case <-held.release:
		case <-req.Context().Done(): // the client went (killed): nothing more to send
			return
		}
		body = body[len(body)/2:]
	}
	_, _ = io.Copy(w, bytes.NewReader(body))
}

// Hold makes GETs of the blob (or manifest) with this digest send half of it and then wait
// until release is called or the client goes; reached is closed once a GET has sent its half.
// After release the digest is served whole again. A pulling process can so be caught in the
// middle of a download.
func (r *Registry) Hold(digest string) (reached <-chan struct{}, release func()) {
	h := &hold{reached: make(chan struct{}), release: make(chan struct{})}
	r.mu.Lock()
	r.holds[digest] = h
	r.mu.Unlock()
	var once sync.Once
	return h.reached, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.holds, digest)
			r.mu.Unlock()
			close(h.release)
		})
	}
}

// Push uploads img as HOST/repoTag (e.g. "vm/disk:v1") and returns that reference.
func (r *Registry) Push(tb testing.TB, repoTag string, img v1.Image) string {
	tb.Helper()
	ref := r.Host + "/" + repoTag
	parsed, err := name.ParseReference(ref)
	if err != nil {
		tb.Fatalf("parse %s: %v", ref, err)
	}
	r.mu.Lock()
	auth := authn.FromConfig(authn.AuthConfig{Username: r.user, Password: r.pass})
	if r.user == "" {
		auth = authn.Anonymous
	}
	r.mu.Unlock()
	if err := remote.Write(parsed, img, remote.WithAuth(auth)); err != nil {
		tb.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// Gets is the number of GET requests for manifests or blobs (kind "manifests" or "blobs").
func (r *Registry) Gets(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[kind]
}

// Corrupt makes the registry serve the blob or manifest with this digest with one byte flipped
// (same length, same headers).
func (r *Registry) Corrupt(digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.corrupt[digest] = true
}

// Uncorrupt serves digest's content unchanged again.
func (r *Registry) Uncorrupt(digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.corrupt, digest)
}

// Close stops the registry: later pulls fail to connect (connection refused). What was pushed
// is kept for Reopen.
func (r *Registry) Close() {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	r.srv.Close()
}

// Reopen serves the registry again on the same address after Close, with what was pushed.
func (r *Registry) Reopen(tb testing.TB) {
	tb.Helper()
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	l, err := net.Listen("tcp", r.Host)
	if err != nil {
		tb.Fatalf("reopen registry on %s: %v", r.Host, err)
	}
	r.srv = serve(l, r.handler)
}

// serve starts an HTTP test server for h on l.
func serve(l net.Listener, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	return srv
}
